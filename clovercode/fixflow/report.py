"""What a fix says about itself: the commit message, the pull request, the console summary (pure text).

Everything in them that the model, the tests or the issue's author wrote is made inert first
(clovercode/trust/markdown.py): no closing keyword but clovercode's own ``Fixes #N``, no mention, no
image or HTML, code fences that hold."""

from __future__ import annotations

import textwrap
from typing import Callable, Sequence, Union

from clovercode import __version__
from clovercode.fixflow.issue import Issue
from clovercode.fixflow.testrun import TestCommand, TestRun
from clovercode.fixflow.verdict import FIXED, REGRESSED, Conclusion, Verdict, names
from clovercode.trust.markdown import code_span, fence, inert_markdown, inert_text
from clovercode.vcs.git import FileStat

# The model's finish summaries as (feedback round, text), or one text
Summaries = Union[str, Sequence[tuple[int, str]], None]
NO_SUMMARY = "The model gave no summary."

SUBJECT_CHARS = 72
SUMMARY_CHARS = 20_000  # GitHub refuses pull request bodies over 65,536 characters
ISSUE_LINES, ISSUE_CHARS = 30, 2_000  # the issue as the commit message quotes it
ALL_NAMES = 200  # test ids the commit message and the pull request list in full (JSON has all of them)


def subject(issue: Issue, conclusion: Conclusion | None = None) -> str:
    """The outcome and the issue on one line of 72 characters: 'Fix #42: <title>' only for a change a
    test shows fixed; 'Attempt #42 (unverified): <title>' or '(breaks tests)' otherwise."""
    number = f" #{issue.number}" if issue.number is not None else ""
    if conclusion is None or conclusion.outcome == FIXED:
        head = f"Fix{number}: "
    else:
        head = f"Attempt{number} ({'breaks tests' if conclusion.outcome == REGRESSED else 'unverified'}): "
    line = head + inert_text(" ".join(issue.title.split()))
    return line if len(line) <= SUBJECT_CHARS else line[: SUBJECT_CHARS - 1].rstrip() + "…"


def wrap(text: str, indent: str = "", subsequent: str | None = None) -> str:
    """Wrapped at 72 without ever breaking a word: a test id or a path stays whole on its line."""
    return textwrap.fill(text, 72, initial_indent=indent, subsequent_indent=indent if subsequent is None else subsequent,
                         break_long_words=False, break_on_hyphens=False)


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


def verdict_lines(verdict: Verdict | None, limit: int = 10, show: Callable[[str], str] = str) -> list[str]:
    """The test verdict against the baseline: fixed, regressions, still failing, named (the first
    ``limit`` of each list; ``show`` formats a test id, e.g. as a Markdown code span)."""
    if verdict is None:
        return []
    if not verdict.per_test:
        return [f"Verdict: {verdict.describe()}" + (f" ({verdict.note})" if verdict.note else "") + "."]

    def listed(tests: tuple[str, ...]) -> str:
        return names([show(t) for t in tests], limit)

    lines = [f"Fixed (failed before, pass now): {listed(verdict.fixed)}." if verdict.fixed
             else "No failing test was fixed by this change." if verdict.failing_before
             else "No failing test was fixed by this change: no test failed before it (none shows the fix)."]
    lines.append(f"Regressions (passed before, fail now): {listed(verdict.regressions)}." if verdict.regressions
                 else "Regressions: none.")
    if verdict.still_failing:
        lines.append(f"Still failing (failed before the change too): {listed(verdict.still_failing)}.")
    return lines


def outcome_line(conclusion: Conclusion | None) -> str:
    if conclusion is None:
        return ""
    return f"Outcome: {conclusion.outcome} ({conclusion.reason})."


def issue_text(issue: Issue) -> str:
    """The issue's title and its body cut to ISSUE_LINES lines / ISSUE_CHARS characters."""
    body = issue.body.strip()
    lines = body.splitlines()
    cut = "\n".join(lines[:ISSUE_LINES])[:ISSUE_CHARS].rstrip()
    if cut != body:
        cut += "\n[…]"
    return f"{' '.join(issue.title.split())}\n\n{cut}".strip()


def commit_message(issue: Issue, summary: Summaries, command: TestCommand | None, runs: list[TestRun],
                   reference: str | None, verdict: Verdict | None = None, conclusion: Conclusion | None = None,
                   stats: Sequence[FileStat] | None = None, left_out: Sequence[str] = ()) -> str:
    """The whole change: a subject that states the outcome, what changed and why (wrapped at 72,
    never inside a word), the issue, the changed files with their line counts, the tests named in
    full, files left out on purpose, and 'Fixes #N' (only when fixed; 'Refs #N' otherwise). Text from the model, the tests or the issue is inert (trust/markdown.py)."""
    paragraphs = []
    for block in inert_text(change_text(summary)).split("\n\n"):
        lines = block.splitlines()
        # keep lists and code as they are; re-wrap plain prose
        if any(line.lstrip().startswith(("-", "*", "```", "    ")) for line in lines):
            paragraphs.append(block.rstrip())
        else:
            paragraphs.append(wrap(" ".join(block.split())))
    quoted = [line if not line.strip() or line.startswith(("    ", "\t", "```", "~~~")) else wrap(line, "    ")
              for line in inert_text(issue_text(issue)).splitlines()]
    paragraphs.append("Issue:\n" + "\n".join(line if line.startswith("    ") or not line.strip() else "    " + line
                                              for line in quoted).rstrip())
    if stats is not None:
        paragraphs.append("Changed files:\n" + ("\n".join(f"    {inert_text(s.path)} ({_lines(s)})" for s in stats)
                                                or "    (none)"))
    if left_out:
        paragraphs.append("Not committed (left out on purpose):\n" + "\n".join(f"    {inert_text(p)}" for p in left_out))
    tests = [wrap(inert_text(tests_line(command, runs)))]
    if conclusion is not None:
        tests.append(wrap(outcome_line(conclusion), subsequent="  "))
    for label, listed in _test_lists(verdict):
        tests.append(f"{label}:")
        tests += [f"  - {inert_text(test)}" for test in listed[:ALL_NAMES]]
        if len(listed) > ALL_NAMES:
            tests.append(f"  - … {len(listed) - ALL_NAMES} more: all are in the JSON result (tests)")
    if verdict is not None and not verdict.per_test:
        tests += [wrap(line, subsequent="  ") for line in verdict_lines(verdict)]
    elif verdict is not None and not verdict.fixed:
        tests.append(verdict_lines(verdict)[0])
    paragraphs.append("\n".join(tests))
    if reference:
        paragraphs.append(f"{closing_word(conclusion)} {reference}")
    return subject(issue, conclusion) + "\n\n" + "\n\n".join(paragraphs) + "\n"


def closing_word(conclusion: Conclusion | None) -> str:
    """'Fixes' (GitHub closes the issue on merge) only for a change a test shows fixed; a draft that
    is marked ready and merged must not close an issue nobody saw fixed."""
    return "Fixes" if conclusion is None or conclusion.outcome == FIXED else "Refs"


def _lines(stat: FileStat) -> str:
    return "binary" if stat.added is None else f"+{stat.added} -{stat.removed}"


def _test_lists(verdict: Verdict | None) -> list[tuple[str, tuple[str, ...]]]:
    if verdict is None or not verdict.per_test:
        return []
    lists = [("Fixed (failed before, pass now)", verdict.fixed),
             ("Regressions (passed before, fail now)", verdict.regressions),
             ("Still failing (failed before the change too)", verdict.still_failing)]
    return [(label, tests) for label, tests in lists if tests]


def diffstat_table(stats: list[FileStat]) -> str:
    rows = []
    for stat in stats:
        changes = "binary" if stat.added is None else f"+{stat.added} −{stat.removed}"
        rows.append(f"| {code_span(stat.path)} | {changes} |")
    return "| file | lines |\n|---|---|\n" + "\n".join(rows) if rows else "(no files)"


def pull_body(issue: Issue, summary: Summaries, command: TestCommand | None, runs: list[TestRun],
              stats: list[FileStat], reference: str | None, model: str, steps: int,
              verdict: Verdict | None = None, conclusion: Conclusion | None = None, left_out: Sequence[str] = (),
              clean: str | None = None) -> str:
    """The pull request's Markdown (``clean``: the clean-checkout check in one line, fixflow/cleanrun.py). Only clovercode's own words are live: its ``Fixes #N`` (added
    after everything else was made inert), its headings, its table and its <details>."""
    parts = []
    if reference:
        parts.append(f"{closing_word(conclusion)} {reference}")
    text = change_text(summary)
    if len(text) > SUMMARY_CHARS:
        text = text[:SUMMARY_CHARS] + "\n\n[… the summary is cut here; the commit message has all of it]"
    parts.append("## Summary\n\n" + inert_markdown(text))
    if issue.ref is None:  # a text or file issue: nothing on GitHub shows what was asked
        parts.append("## Issue\n\n" + textwrap.indent(inert_markdown(issue_text(issue)), "> ", lambda line: True))
    changes = "## Changes\n\n" + diffstat_table(stats)
    if left_out:
        changes += "\n\nNot committed (left out on purpose):\n\n" + "\n".join(f"- {inert_markdown(p)}" for p in left_out)
    parts.append(changes)
    tests = "## Tests\n\n" + inert_markdown(tests_line(command, runs).removeprefix("Tests: "))
    if verdict is not None:
        tests += "\n\n" + "\n".join(f"- {inert_markdown(line)}" for line in verdict_lines(verdict, ALL_NAMES, code_span))
    if clean:
        tests += f"\n\nClean checkout: {inert_markdown(clean)}."
    if conclusion is not None and conclusion.outcome != FIXED:
        why = ("the tests fail: the change breaks tests that passed before" if conclusion.outcome == REGRESSED
               else f"no test shows the issue fixed: {conclusion.reason}")
        tests += f"\n\n**{inert_markdown(why[0].upper() + why[1:])}; so this pull request is a draft.**"
    elif conclusion is None and runs and (verdict.regressed if verdict is not None else not runs[-1].passed):
        tests += "\n\n**The tests fail, so this pull request is a draft.**"
    if runs:
        tests += (f"\n\n<details><summary>Output of the last test run</summary>\n\n{fence(runs[-1].tail())}\n\n</details>")
    parts.append(tests)
    parts.append(f"---\nWritten by clovercode {__version__} with model `{model}` "
                 f"in {steps} step{'s' if steps != 1 else ''}, unattended. Review it like any other change.")
    return "\n\n".join(parts) + "\n"
