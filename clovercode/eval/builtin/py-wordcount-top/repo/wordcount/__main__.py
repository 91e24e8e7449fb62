import sys

from wordcount.cli import main

sys.exit(main())
