"""What a fix says about itself: the commit message, the pull request, the console summary (pure text)."""

from __future__ import annotations

import textwrap

from clovercode import __version__
from clovercode.fixflow.issue import Issue
from clovercode.fixflow.testrun import TestCommand, TestRun
from clovercode.vcs.git import FileStat

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


def commit_message(issue: Issue, summary: str | None, command: TestCommand | None, runs: list[TestRun],
                   reference: str | None) -> str:
    """Subject, the model's summary (what changed and why) wrapped at 72, the test result, 'Fixes #N'."""
    paragraphs = []
    for block in (summary or "The model gave no summary.").strip().split("\n\n"):
        lines = block.splitlines()
        # keep lists and code as they are; re-wrap plain prose
        if any(line.lstrip().startswith(("-", "*", "```", "    ")) for line in lines):
            paragraphs.append(block.rstrip())
        else:
            paragraphs.append(textwrap.fill(" ".join(block.split()), 72))
    paragraphs.append(textwrap.fill(tests_line(command, runs), 72))
    if reference:
        paragraphs.append(f"Fixes {reference}")
    return subject(issue) + "\n\n" + "\n\n".join(paragraphs) + "\n"


def diffstat_table(stats: list[FileStat]) -> str:
    rows = []
    for stat in stats:
        changes = "binary" if stat.added is None else f"+{stat.added} −{stat.removed}"
        rows.append(f"| `{stat.path}` | {changes} |")
    return "| file | lines |\n|---|---|\n" + "\n".join(rows) if rows else "(no files)"


def pull_body(issue: Issue, summary: str | None, command: TestCommand | None, runs: list[TestRun],
              stats: list[FileStat], reference: str | None, model: str, steps: int) -> str:
    parts = []
    if reference:
        parts.append(f"Fixes {reference}")
    text = (summary or "The model gave no summary.").strip()
    if len(text) > SUMMARY_CHARS:
        text = text[:SUMMARY_CHARS] + "\n\n[… the summary is cut here; the commit message has all of it]"
    parts.append("## Summary\n\n" + text)
    parts.append("## Changes\n\n" + diffstat_table(stats))
    tests = "## Tests\n\n" + tests_line(command, runs).removeprefix("Tests: ")
    if runs:
        last = runs[-1]
        if not last.passed:
            tests += "\n\n**The tests fail, so this pull request is a draft.**"
        fence = "````" if "```" in last.output else "```"
        tests += (f"\n\n<details><summary>Output of the last test run</summary>\n\n{fence}\n{last.tail()}\n{fence}\n\n</details>")
    parts.append(tests)
    parts.append(f"---\nWritten by clovercode {__version__} with model `{model}` "
                 f"in {steps} step{'s' if steps != 1 else ''}, unattended. Review it like any other change.")
    return "\n\n".join(parts) + "\n"
