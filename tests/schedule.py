"""The order files go to pytest-xdist's workers: the longest first (longest-processing-time first).

With `--dist loadfile` a file runs whole on one worker, and a worker takes the next file when it is
free; a long file handed out last runs alone at the end while the other worker idles (a 110-second
llama.cpp file did). So the files are ordered by their measured seconds, longest first
(tests/file_seconds.txt; a file not measured yet counts 0.3 s a test), and xdist is told to keep that
order (`--no-loadscope-reorder`; it would otherwise order by the number of tests).

Re-measure after the suite changes shape: `pytest --junitxml=/tmp/j.xml` and then
`python tests/schedule.py /tmp/j.xml > tests/file_seconds.txt`.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

SECONDS = Path(__file__).resolve().parent / "file_seconds.txt"
UNMEASURED = 0.3  # seconds a test of a file not in the table counts


def measured() -> dict[str, float]:
    if not SECONDS.exists():
        return {}
    table = {}
    for line in SECONDS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, path = line.split()
            table[path] = float(seconds)
    return table


def longest_first(items: list) -> None:
    """Reorder ``items`` (in place) file by file, the longest file first; order inside a file kept."""
    table = measured()
    counts = Counter(item.nodeid.split("::", 1)[0] for item in items)
    cost = {path: table.get(path, UNMEASURED * count) for path, count in counts.items()}
    first_seen = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], index)
    items.sort(key=lambda item: (-cost[item.nodeid.split("::", 1)[0]], first_seen[item.nodeid.split("::", 1)[0]]))


def from_junit(path: str) -> dict[str, float]:
    """Seconds per test file in a junit XML report (setup, call and teardown of each test)."""
    import xml.etree.ElementTree as ET

    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        parts = []
        for part in module:  # tests.test_x.TestClass -> tests/test_x.py
            parts.append(part)
            if part.startswith("test_"):
                break
        totals["/".join(parts) + ".py"] += float(case.get("time", 0) or 0)
    return dict(totals)


if __name__ == "__main__":
    totals = from_junit(sys.argv[1])
    print("# seconds per test file (setup + call + teardown), from one whole-suite run: tests/schedule.py")
    for path, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{seconds:8.1f}  {path}")
