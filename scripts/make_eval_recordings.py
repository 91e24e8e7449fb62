#!/usr/bin/env python3
"""Regenerate the replay recordings of the eval acceptance test (tests/data/eval_replays/).

Each recording is a scripted model run on one task of the built-in suite, written to behave in a
known way: some solve their task, others fail in a specific manner. tests/test_eval_acceptance.py
states, turn by turn, what each recording does and computes the expected metrics by hand from
that; if you change a recording here, change the hand computation there.

    python3 scripts/make_eval_recordings.py [--check]

--check exits 1 when the files on disk differ from what this script writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "eval_replays"
BUILTIN = ROOT / "clovercode" / "eval" / "builtin"
PY_TESTS = "python3 -m unittest discover -s tests -q"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 50}
# py-date-range plays an engine run: every turn reports its forward passes and its own seconds.
ENGINE_USAGE = {"prompt_tokens": 1000, "completion_tokens": 40, "forwards": 20, "seconds": 0.5}


def xml(name: str, **params: object) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def hermes(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def solution(task: str, path: str) -> str:
    return (BUILTIN / task / "solution" / path).read_text(encoding="utf-8")


def recordings() -> dict[str, tuple[list[str], dict]]:
    """file name -> (turns, usage of every turn)."""
    return {
        # Solves in 4 clean steps: view, edit, visible tests pass, finish.
        "py-date-range.jsonl": ([
            "<think>\nThe loop stops before `end`; it must include it.\n</think>\n" + xml("view_file", path="calendar_utils/ranges.py"),
            xml("edit_file", path="calendar_utils/ranges.py", old_text="    while current < end:", new_text="    while current <= end:"),
            xml("run_command", command=PY_TESTS),
            xml("finish", summary="date_range() now includes the end date (<= instead of <); the tests pass."),
        ], ENGINE_USAGE),
        # Invalid call (missing path), recovers; a reply without a call, recovers; solves.
        "js-chunk.jsonl": ([
            xml("view_file", start_line=1),
            xml("view_file", path="src/array.js"),
            "The loop condition `i + size <= items.length` drops the last, shorter chunk.",
            hermes("edit_file", path="src/array.js",
                   old_text="  const out = [];\n  if (!(size > 0)) return out;\n  for (let i = 0; i + size <= items.length; i += size) {",
                   new_text="  if (!Number.isInteger(size) || size < 1) {\n"
                            "    throw new RangeError(`size must be a positive integer, got ${size}`);\n  }\n"
                            "  const out = [];\n  for (let i = 0; i < items.length; i += size) {"),
            xml("run_command", command="node --test"),
            xml("finish", summary="chunk() keeps the last partial chunk and rejects bad sizes."),
        ], USAGE),
        # An edit whose old_text is not in the file (never read), recovers by reading; solves.
        "py-lru-cache.jsonl": ([
            xml("edit_file", path="cachelib/lru.py", old_text="self._data.popitem()  # evict", new_text="self._data.popitem(last=False)"),
            xml("view_file", path="cachelib/lru.py"),
            xml("edit_file", path="cachelib/lru.py", old_text="            self._data.popitem(last=True)",
                new_text="            self._data.popitem(last=False)"),
            xml("edit_file", path="cachelib/lru.py", old_text="            return default\n        return self._data[key]",
                new_text="            return default\n        self._data.move_to_end(key)\n        return self._data[key]"),
            xml("run_command", command=PY_TESTS),
            xml("finish", summary="get() refreshes recency and put() evicts the least recently used entry."),
        ], USAGE),
        # Never changes anything: explores and re-runs failing tests until the step budget (14) runs out.
        "py-semver.jsonl": ([
            xml("list_files"),
            xml("view_file", path="versions.py"),
            xml("run_command", command=PY_TESTS),  # fails
            xml("view_file", path="tests/test_versions.py"),
            xml("search_text", pattern="def compare"),
            xml("run_command", command="python3 -c \"import versions; print(versions.compare('1.10.0', '1.9.0'))\""),
            xml("view_file", path="updater.py"),
            xml("run_command", command="python3 -m unittest discover -s tests"),  # fails
            xml("view_file", path="versions.py", start_line=7, end_line=18),
            xml("run_command", command="python3 -m unittest tests.test_versions"),  # fails
            xml("run_command", command="ls -la"),
            xml("run_command", command="python3 -m unittest discover -s tests -v"),  # fails
            xml("run_command", command="git log --oneline"),
            xml("run_command", command="python3 -m unittest discover -s tests -p 'test_*.py'"),  # fails; step 14, the last
            xml("list_files"),
            xml("finish", summary="never reached"),
        ], USAGE),
        # Repeat 1: a wrong fix (runs collapse, ends not stripped): visible tests pass, hidden ones fail.
        "py-slugify.r1.jsonl": ([
            xml("view_file", path="textutils/slug.py"),
            xml("edit_file", path="textutils/slug.py", old_text='    text = re.sub(r"[^a-z0-9]", separator, text)',
                new_text='    text = re.sub(r"[^a-z0-9]+", separator, text)'),
            xml("run_command", command=PY_TESTS),
            xml("finish", summary="Runs of separators collapse to one."),
        ], USAGE),
        # Repeat 2: the full fix.
        "py-slugify.r2.jsonl": ([
            xml("view_file", path="textutils/slug.py"),
            xml("edit_file", path="textutils/slug.py",
                old_text='    text = re.sub(r"[^a-z0-9]", separator, text)\n    if max_length is not None:\n'
                         '        text = text[:max_length]\n',
                new_text='    text = re.sub(r"[^a-z0-9]+", separator, text).strip(separator)\n    if max_length is not None:\n'
                         '        text = text[:max_length].rstrip(separator)\n'),
            xml("run_command", command=PY_TESTS),
            xml("finish", summary="Runs collapse to one separator, none at the ends, also after truncation."),
        ], USAGE),
        # The long task: 12 steps; the tests fail halfway (two modules still missing), then pass.
        "py-inventory.jsonl": ([
            xml("list_files"),
            xml("view_file", path="inventory/store.py"),
            xml("view_file", path="inventory/report.py"),
            xml("view_file", path="inventory/persist.py"),
            xml("view_file", path="tests/test_inventory.py"),
            xml("write_file", path="inventory/store.py", content=solution("py-inventory", "inventory/store.py")),
            xml("run_command", command=PY_TESTS),  # fails: report and persist are not written yet
            xml("write_file", path="inventory/report.py", content=solution("py-inventory", "inventory/report.py")),
            xml("write_file", path="inventory/persist.py", content=solution("py-inventory", "inventory/persist.py")),
            xml("run_command", command=PY_TESTS),
            xml("run_command", command="git status --short"),
            xml("finish", summary="Implemented Store, the reports and JSON persistence; all tests pass."),
        ], USAGE),
        # Finishes with half a fix; fix's test round fails and feeds the failures back; the second
        # round completes the fix. Turns 1-3 are round 0, turns 4-6 the feedback round.
        "js-deep-equal.jsonl": ([
            xml("view_file", path="src/equal.js"),
            xml("edit_file", path="src/equal.js", old_text="  if (a === b) return true;",
                new_text="  if (a === b || (Number.isNaN(a) && Number.isNaN(b))) return true;"),
            xml("finish", summary="NaN now equals NaN."),
            xml("edit_file", path="src/equal.js",
                old_text="  for (const key of Object.keys(a)) {\n    if (!deepEqual(a[key], b[key])) return false;\n  }",
                new_text="  if (Array.isArray(a) !== Array.isArray(b)) return false;\n"
                         "  const keysA = Object.keys(a);\n  const keysB = Object.keys(b);\n"
                         "  if (keysA.length !== keysB.length) return false;\n  for (const key of keysA) {\n"
                         "    if (!Object.prototype.hasOwnProperty.call(b, key) || !deepEqual(a[key], b[key])) return false;\n  }"),
            xml("run_command", command="node --test"),
            xml("finish", summary="Keys are compared both ways, arrays never equal objects, NaN equals NaN."),
        ], USAGE),
        # Three turns in a row without a valid call: prose, an unknown tool, an unknown parameter.
        "js-roman.jsonl": ([
            "Let me look at the numeral table first.",
            xml("read_file", path="src/roman.js"),
            xml("view_file", path="src/roman.js", lines="1-20"),
            xml("finish", summary="never reached"),
        ], USAGE),
        # The same failing edit three times: the loop stops it (repeated failures).
        "py-intervals.jsonl": ([
            xml("view_file", path="schedule.py"),
            *[xml("edit_file", path="schedule.py",
                  old_text="    for start, end in intervals:\n        if result and start <= result[-1][1]:",
                  new_text="    for start, end in sorted(intervals):\n        if result and start <= result[-1][1]:")] * 3,
            xml("finish", summary="never reached"),
        ], USAGE),
    }


def render(turns: list[str], usage: dict) -> str:
    return "".join(json.dumps({"text": text, "usage": usage}, ensure_ascii=False) + "\n" for text in turns)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (turns, usage) in recordings().items():
        path, text = OUT / name, render(turns, usage)
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date: " + ", ".join(stale) + " (run scripts/make_eval_recordings.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
