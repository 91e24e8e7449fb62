"""What a fix says about itself: the commit message, the pull request, the console summary (pure text)."""

from __future__ import annotations

import textwrap
from typing import Sequence, Union

from clovercode import __version__
from clovercode.fixflow.issue import Issue
from clovercode.fixflow.testrun import TestCommand, TestRun
from clovercode.fixflow.verdict import Verdict, names
from clovercode.vcs.git import FileStat

# The model's finish summaries as (feedback round, text), or one text
Summaries = Union[str, Sequence[tuple[int, str]], None]
NO_SUMMARY = "The model gave no summary."

SUBJECT_CHARS = 72
SUMMARY_CHARS = 20_000  # GitHub refuses pull request bodies over 65,536 characters


def subject(issue: Issue) -> str:
    """'Fix #42: <title>' (or 'Fix: <title>'), cut to one line of 72 characters."""
    head = f"Fix #{issue.number}: " if issue.number is not None else "Fix: "
    line = head + " ".join(issue.title.split())
    return line if len(line) <= SUBJECT_CHARS else line[: SUBJECT_CHARS - 1].rstrip() + "…"


def tests_line(command: TestCommand | None, runs: list[TestRun]) -> str:
    if command is None:
        return "Tests: none run (no test command configured or detected)."
    if not runs:
        return f"Tests: `{command.command}` was not run."
    last = runs[-1]
    rounds = f" after {last.round} round{'s' if last.round != 1 else ''} of test feedback" if last.round else ""
    return f"Tests: `{last.command}` {last.describe()}{rounds}."


def change_text(summaries: Summaries) -> str:
    """The change as a whole: the first finish summary, then what each feedback round changed."""
    if summaries is None or isinstance(summaries, str):
        return (summaries or NO_SUMMARY).strip() or NO_SUMMARY
    parts: list[str] = []
    for round_, text in summaries:
        text = text.strip()
        if not text or text in parts or any(part.endswith(": " + text) for part in parts):
            continue  # a round that repeated its summary adds nothing
        parts.append(text if not parts else f"After round {round_} of test feedback: {text}")
    return "\n\n".join(parts) or NO_SUMMARY


def verdict_lines(verdict: Verdict | None) -> list[str]:
    """The test verdict against the baseline: fixed, regressions, still failing, named."""
    if verdict is None:
        return []
    if not verdict.per_test:
        return [f"Verdict: {verdict.describe()}" + (f" ({verdict.note})" if verdict.note else "") + "."]
    lines = [f"Fixed (failed before, pass now): {names(verdict.fixed)}." if verdict.fixed
             else "No failing test was fixed by this change." if verdict.failing_before
             else "No failing test was fixed by this change: no test failed before it (none shows the fix)."]
    lines.append(f"Regressions (passed before, fail now): {names(verdict.regressions)}." if verdict.regressions
                 else "Regressions: none.")
    if verdict.still_failing:
        lines.append(f"Still failing (failed before the change too): {names(verdict.still_failing)}.")
    return lines


def commit_message(issue: Issue, summary: Summaries, command: TestCommand | None, runs: list[TestRun],
                   reference: str | None, verdict: Verdict | None = None) -> str:
    """Subject, the change as a whole (what changed and why) wrapped at 72, the test verdict, 'Fixes #N'."""
    paragraphs = []
    for block in change_text(summary).split("\n\n"):
        lines = block.splitlines()
        # keep lists and code as they are; re-wrap plain prose
        if any(line.lstrip().startswith(("-", "*", "```", "    ")) for line in lines):
            paragraphs.append(block.rstrip())
        else:
            paragraphs.append(textwrap.fill(" ".join(block.split()), 72))
    tests = [textwrap.fill(tests_line(command, runs), 72)]
    tests += [textwrap.fill(line, 72, subsequent_indent="  ") for line in verdict_lines(verdict)]
    paragraphs.append("\n".join(tests))
    if reference:
        paragraphs.append(f"Fixes {reference}")
    return subject(issue) + "\n\n" + "\n\n".join(paragraphs) + "\n"


def diffstat_table(stats: list[FileStat]) -> str:
    rows = []
    for stat in stats:
        changes = "binary" if stat.added is None else f"+{stat.added} −{stat.removed}"
        rows.append(f"| `{stat.path}` | {changes} |")
    return "| file | lines |\n|---|---|\n" + "\n".join(rows) if rows else "(no files)"


def pull_body(issue: Issue, summary: Summaries, command: TestCommand | None, runs: list[TestRun],
              stats: list[FileStat], reference: str | None, model: str, steps: int,
              verdict: Verdict | None = None) -> str:
    parts = []
    if reference:
        parts.append(f"Fixes {reference}")
    text = change_text(summary)
    if len(text) > SUMMARY_CHARS:
        text = text[:SUMMARY_CHARS] + "\n\n[… the summary is cut here; the commit message has all of it]"
    parts.append("## Summary\n\n" + text)
    parts.append("## Changes\n\n" + diffstat_table(stats))
    tests = "## Tests\n\n" + tests_line(command, runs).removeprefix("Tests: ")
    if verdict is not None:
        tests += "\n\n" + "\n".join(f"- {line}" for line in verdict_lines(verdict))
    if runs:
        last = runs[-1]
        failing = verdict.regressed if verdict is not None else not last.passed
        if failing:
            tests += ("\n\n**The tests fail" + (" (the change breaks tests that passed before)" if verdict is not None and verdict.baseline else "")
                      + ", so this pull request is a draft.**")
        fence = "````" if "```" in last.output else "```"
        tests += (f"\n\n<details><summary>Output of the last test run</summary>\n\n{fence}\n{last.tail()}\n{fence}\n\n</details>")
    parts.append(tests)
    parts.append(f"---\nWritten by clovercode {__version__} with model `{model}` "
                 f"in {steps} step{'s' if steps != 1 else ''}, unattended. Review it like any other change.")
    return "\n\n".join(parts) + "\n"
