"""Which of ``fix --attempts N``'s attempts is published, and how the choice is shown (pure).

The evidence is each attempt's verdict, taken like a single fix's (fixflow/verdict.py) and, for a
fix, proven once more in a clean checkout (fixflow/cleanrun.py). Only an attempt with a commit can
be chosen. The best verdict wins (fixed > unverified > regressed), then the smallest diff (lines
added plus removed), then the fewest model steps, then the lowest attempt number, so a run chooses
the same attempt every time it sees the same attempts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from clovercode.fixflow.verdict import FIXED, REGRESSED, UNVERIFIED
from clovercode.ground.attemptlog import published_attempt

RANK = {FIXED: 0, UNVERIFIED: 1, REGRESSED: 2}
# Attempts after the first sample at this temperature when the configured one is greedy (0): N greedy
# attempts of one prompt would be N copies of one attempt. Attempt 1 keeps the configured settings,
# so `--attempts 1` and the first of N are the same run.
ATTEMPT_TEMPERATURE = 0.7


def attempt_settings(k: int, temperature: float) -> tuple[int, float]:
    """Attempt ``k``'s sampling seed and temperature, given the configured temperature (fix and eval)."""
    return k, temperature or (ATTEMPT_TEMPERATURE if k > 1 else 0.0)


def diff_lines(entry: Mapping[str, Any]) -> int:
    diff = entry.get("diff") or {}
    return int(diff.get("added") or 0) + int(diff.get("removed") or 0)


def choose(entries: Iterable[Mapping[str, Any]]) -> int | None:
    """The chosen attempt's number (``entry["attempt"]``), None when no attempt has a commit to publish."""
    eligible = [e for e in entries if e.get("commit") and e.get("verdict") in RANK]
    if not eligible:
        return None
    best = min(eligible, key=lambda e: (RANK[e["verdict"]], diff_lines(e), int(e.get("steps") or 0), int(e["attempt"])))
    return int(best["attempt"])


def diff_text(entry: Mapping[str, Any]) -> str:
    diff = entry.get("diff") or {}
    if not entry.get("commit"):
        return "no commit"
    files = int(diff.get("files") or 0)
    return f"+{diff.get('added') or 0} −{diff.get('removed') or 0} in {files} file{'s' if files != 1 else ''}"


def why_chosen(entries: list[Mapping[str, Any]], chosen: int) -> str:
    """Which rule decided: said in the summary and the pull request."""
    best = next(e for e in entries if e["attempt"] == chosen)
    same = [e for e in entries if e is not best and e.get("commit") and e.get("verdict") == best["verdict"]]
    if not same:
        return f"the best verdict: {best['verdict']}"
    tied = [e for e in same if diff_lines(e) == diff_lines(best)]
    if not tied:
        return f"{best['verdict']}, with the smallest diff"
    if all(int(e.get("steps") or 0) != int(best.get("steps") or 0) for e in tied):
        return f"{best['verdict']}, the smallest diff, in the fewest steps"
    return f"{best['verdict']}, tied: the lowest attempt number"


def attempts_table(entries: list[Mapping[str, Any]], chosen: int | None) -> str:
    """The pull request's account of every attempt: "chose attempt k of N" and a collapsed table."""
    n = len(entries)
    head = (f"clovercode chose attempt {chosen} of {n} ({why_chosen(entries, chosen)}); only its commit is in this "
            "pull request." if chosen is not None else f"clovercode ran {n} attempts; none has a commit to publish.")
    rows = ["| Attempt | Verdict | Diff | Steps | Tests |", "|---|---|---|---|---|"]
    for e in entries:
        mark = " (chosen)" if e["attempt"] == chosen else ""
        rows.append(f"| {e['attempt']}{mark} | {_cell(e.get('verdict') or e.get('status') or '?')} | {diff_text(e)} "
                    f"| {e.get('steps') or 0} | {_cell(_tests(e))} |")
    return (f"{head}\n\n<details><summary>All {n} attempts: verdict and diff size</summary>\n\n"
            + "\n".join(rows) + "\n\n</details>\n")


def summary_lines(entries: list[Mapping[str, Any]], chosen: int | None) -> list[str]:
    """One line per attempt for the terminal."""
    lines = []
    for e in entries:
        mark = "→ " if e["attempt"] == chosen else "  "
        lines.append(f"{mark}attempt {e['attempt']}: {e.get('verdict') or e.get('status')} · {diff_text(e)} · "
                     f"{e.get('steps') or 0} steps · {e.get('seconds') or 0:.1f}s"
                     + (f" · {e['error']}" if e.get("error") else ""))
    return lines


def replay_for(path: Path, k: int) -> Path:
    """The recording attempt ``k`` replays: ``A.k.jsonl`` next to ``A.jsonl`` when it exists; for the
    events file of an earlier ``fix --attempts`` run, that run's attempt ``k`` (nested under it);
    else ``A.jsonl`` itself (every attempt replays it from its start)."""
    own = path.with_name(f"{path.stem}.{k}{path.suffix}")
    if own.is_file():
        return own
    return published_attempt(path, k) or path


def _tests(entry: Mapping[str, Any]) -> str:
    tests = entry.get("tests") or {}
    if tests.get("passed") is None:
        return "not run"
    clean = tests.get("clean_checkout")
    alone = "" if not clean else (" (alone: passed)" if clean.get("passed") else " (alone: failed)" if clean.get("verified") else "")
    return ("passed" if tests["passed"] else "failed") + alone


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
