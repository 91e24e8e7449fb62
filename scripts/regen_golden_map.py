#!/usr/bin/env python3
"""Rewrite tests/fixtures/context/sample_repo.map.txt from the current code. Run it after a change
that is meant to alter the map (queries, ranking, rendering), then review the diff before committing:

    .venv/bin/python scripts/regen_golden_map.py
"""

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from golden_map import GOLDEN, render_sample_map  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        text = render_sample_map(Path(tmp))
    GOLDEN.write_text(text, encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(REPO)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
