"""A tag-extraction worker process: reads ``rel\\tpath\\tlanguage`` lines on stdin, writes
``rel\\tjson`` lines on stdout. A plain subprocess, so nothing of the parent (threads, a loaded
model, an unguarded main module) is copied or re-run the way multiprocessing would."""

from __future__ import annotations

import json
import sys


def main() -> int:
    from clovercode.context.index import parse_batch

    items = []
    for line in sys.stdin.read().splitlines():
        rel, path, language = line.split("\t")
        items.append((rel, path, language))
    out = sys.stdout
    for rel, tags in parse_batch(items):
        out.write(f"{rel}\t{json.dumps(tags.to_json(), separators=(',', ':'))}\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
