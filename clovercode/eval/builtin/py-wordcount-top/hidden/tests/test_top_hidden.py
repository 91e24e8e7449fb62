import contextlib
import io
import os
import tempfile
import unittest

from wordcount.cli import main
from wordcount.core import count_words, most_common


def run(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


class TopTest(unittest.TestCase):
    def setUp(self):
        handle, self.path = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(handle, "w") as f:
            f.write("b a b c a b d")

    def tearDown(self):
        os.unlink(self.path)

    def test_most_common(self):
        self.assertEqual(most_common(count_words("b a b c a b d"), 2), [("b", 3), ("a", 2)])
        self.assertEqual(most_common(count_words("x"), 5), [("x", 1)])

    def test_cli_top(self):
        code, out = run("--top", "2", self.path)
        self.assertEqual(code, 0)
        self.assertEqual(out, "     3 b\n     2 a\n")

    def test_cli_without_top_prints_all(self):
        code, out = run(self.path)
        self.assertEqual(len(out.splitlines()), 4)

    def test_bad_top(self):
        for bad in ("0", "-1", "many"):
            with contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit) as caught:
                    run("--top", bad, self.path)
            self.assertEqual(caught.exception.code, 2, bad)


if __name__ == "__main__":
    unittest.main()
