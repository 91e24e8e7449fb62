"""A tag-extraction worker process: reads ``[rel, path, language]`` JSON lines on stdin, writes
``[rel, head, details]`` JSON lines on stdout (the tag cache's two columns, stored as they come).
``--keep-generated`` parses generated and minified files too. A plain subprocess, so nothing of the parent (threads, a loaded
model, an unguarded main module) is copied or re-run the way multiprocessing would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Runs a module in a fresh interpreter that imports this very clovercode: isolated mode (-I) keeps
# PYTHONPATH, the user site and the current directory out of sys.path, and the package's parent is
# put first only when the interpreter would not find it anyway (a checkout, not an installation;
# putting site-packages first would shadow the standard library).
_BOOT = ("import runpy, sys\n"
         "parent = sys.argv.pop(1)\n"
         "parent in sys.path or sys.path.insert(0, parent)\n"
         "del sys.argv[0]\n"
         "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")


def python_argv(module: str, *args: str) -> list[str]:
    """argv that runs ``python -m module args`` with this process's clovercode."""
    parent = str(Path(__file__).resolve().parents[2])
    return [sys.executable, "-I", "-c", _BOOT, parent, module, *args]


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
