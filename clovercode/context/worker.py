"""A tag-extraction worker process: reads ``[rel, path, language]`` JSON lines on stdin, writes
``[rel, head, details]`` JSON lines on stdout (the tag cache's two columns, stored as they come).
``--keep-generated`` parses generated and minified files too. A plain subprocess, so nothing of the parent (threads, a loaded
model, an unguarded main module) is copied or re-run the way multiprocessing would."""

from __future__ import annotations

import json
import sys

def main() -> int:
    from clovercode.context.index import parse_batch

    keep_generated = "--keep-generated" in sys.argv[1:]
    items = [tuple(json.loads(line)) for line in sys.stdin.read().splitlines() if line.strip()]
    out = sys.stdout
    for rel, tags in parse_batch(items, keep_generated):  # type: ignore[arg-type]
        out.write(json.dumps([rel, *tags.cache_columns()], separators=(",", ":")) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
