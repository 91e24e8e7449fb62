"""Judge a change by its tests as SWE-bench does: tests it fixed (FAIL_TO_PASS), tests it broke
(PASS_TO_PASS that fail now), tests that failed before and still fail. Pure functions of two runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from clovercode.fixflow.results import FAILED, PASSED, SKIPPED
from clovercode.fixflow.testrun import TestRun

GENERIC = {"", "test", "tests", "src", "lib", "spec", "unit", "integration"}  # folder names, not modules
LIST_LIMIT = 10  # test names shown in one line of a summary; JSON always has all of them


@dataclass(frozen=True)
class Verdict:
    per_test: bool  # both runs had per-test results
    baseline: bool  # a baseline run exists at all
    fixed: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()
    still_failing: tuple[str, ...] = ()
    failing_before: tuple[str, ...] = ()
    regressed: bool = False  # the change made the tests worse; decides exit code 1
    note: str = ""  # why the verdict is coarse (exit code only, no baseline)

    def to_json(self) -> dict[str, Any]:
        return {"fixed": list(self.fixed), "regressions": list(self.regressions),
                "still_failing": list(self.still_failing), "per_test": self.per_test, "regressed": self.regressed,
                "verdict": self.describe(), "note": self.note or None}

    def describe(self) -> str:
        """One line a person (or a bot's log) can act on."""
        if not self.baseline:
            return "no baseline run: judged by the last test run alone"
        if not self.per_test:
            return ("worse than before: the tests passed before the change and fail now" if self.regressed
                    else "the tests failed before the change too (exit code only: no per-test verdict)"
                    if self.failing_before or self.still_failing else "no regression (exit code only)")
        parts = []
        if self.regressions:
            parts.append(f"{count(self.regressions, 'regression')}: {names(self.regressions)}")
        parts.append(f"fixed {count(self.fixed, 'failing test')}: {names(self.fixed)}" if self.fixed
                     else "no failing test was fixed" + ("" if self.failing_before else " (none failed before)"))
        if self.still_failing:
            parts.append(f"{count(self.still_failing, 'test')} failed before and still fail{'s' if len(self.still_failing) == 1 else ''}")
        if not self.regressions:
            parts.append("no regressions")
        return "; ".join(parts)


def count(items: tuple[str, ...] | list[str], noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"


def names(items: Iterable[str], limit: int = LIST_LIMIT) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def verdict(baseline: TestRun | None, after: TestRun) -> Verdict:
    """Compare the run before the model changed anything with the run after its change."""
    if baseline is None:
        return Verdict(False, False, regressed=not after.passed,
                       note="the tests were not run before the change (fix.baseline is off)")
    before_results, after_results = baseline.results, after.results
    if not (before_results.per_test and after_results.per_test):
        note = before_results.note or after_results.note
        return Verdict(False, True, regressed=baseline.passed and not after.passed, note=note,
                       failing_before=() if baseline.passed else ("(the test command)",))
    before, now = before_results.outcomes, after_results.outcomes
    failing_before = {t for t, o in before.items() if o == FAILED}
    failing_now = {t for t, o in now.items() if o == FAILED}
    if after_results.lists_passes:
        fixed = {t for t in failing_before if now.get(t) == PASSED}
    else:  # only failures are named: a test that no longer fails is taken as passing
        fixed = failing_before - failing_now
    # A test that was not there before and fails now is the change's too (a new test, a new module);
    # unless its whole file failed before (a collection error then hid its tests).
    broken_files = {t for t in failing_before if "::" not in t}
    new_failures = {t for t in failing_now - failing_before if t.split("::")[0] not in broken_files}
    regressions = {t for t in new_failures if before.get(t) in (PASSED, None, SKIPPED)}
    if before_results.lists_passes and after_results.lists_passes:
        # a test that passed and is gone now did not pass: a deleted test, or a run that stopped early
        regressions |= {t for t, o in before.items() if o == PASSED and t not in now}
    still = (failing_before & failing_now) | (failing_now - failing_before - regressions)
    return Verdict(True, True, tuple(sorted(fixed)), tuple(sorted(regressions)), tuple(sorted(still)),
                   tuple(sorted(failing_before)), regressed=bool(regressions))


def related_failures(still_failing: Iterable[str], issue_text: str, changed: Iterable[str],
                     files: Mapping[str, str] | None = None) -> list[str]:
    """The still-failing tests that look like the issue's own: testing a file the model changed
    (``test_text.py`` for ``text.py``) or a module the issue names, or containing a code name the
    issue mentions (``slugify()``, `` `parse_date` ``). The others are someone else's failures.
    ``files`` gives the file of a test whose id does not name it (node's TAP)."""
    text = issue_text.lower()
    issue_words = set(re.findall(r"[a-z_][a-z0-9_]*", text))
    code_names = set(re.findall(r"([a-z_][a-z0-9_]*)\s*\(", text))  # called like a function
    code_names |= {word for quoted in re.findall(r"`([^`]+)`", text) for word in re.findall(r"[a-z_][a-z0-9_]*", quoted)}
    code_names |= {word for word in issue_words if "_" in word.strip("_")}
    code_names = {name for name in code_names if len(name) > 3}
    module_names = {_stem(path) for path in changed} | {w for w in issue_words if len(w) > 3}
    related = []
    for test in still_failing:
        where = test.partition("::")[0].removesuffix(".py")
        if files and test in files:
            where += "/" + files[test]
        modules = {_strip_test(part) for part in re.split(r"[/.]", where)} - GENERIC - {"js", "ts", "mjs", "cjs"}
        if modules & module_names or any(code in test.lower() for code in code_names):
            related.append(test)
    return related


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return _strip_test(name.rsplit(".", 1)[0].lower())


def _strip_test(word: str) -> str:
    word = word.lower()
    for prefix in ("test_", "tests_"):
        word = word.removeprefix(prefix)
    for suffix in ("_test", "_tests", ".test", ".spec"):
        word = word.removesuffix(suffix)
    return word
