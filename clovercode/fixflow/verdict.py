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
            if self.regressed and self.note.startswith("the tests hang"):
                return self.note
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
    """The first ``limit`` names, then how many more; never "and 1 more" (that one is named)."""
    items = list(items)
    if len(items) <= limit + 1:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


def verdict(baseline: TestRun | None, after: TestRun) -> Verdict:
    """Compare the run before the model changed anything with the run after its change."""
    if baseline is None:
        return Verdict(False, False, regressed=not after.passed,
                       note="the tests were not run before the change (fix.baseline is off)")
    if after.timed_out and not baseline.timed_out:
        # the suite finished before the change and hangs after it: the change's doing, whatever failed before
        return Verdict(False, True, regressed=True, failing_before=tuple(baseline.results.with_outcome(FAILED)),
                       note=f"the tests hang after the change: they finished in {baseline.seconds:.0f} s before it "
                            f"and ran past the time limit ({after.seconds:.0f} s) after it")
    before_results, after_results = baseline.results, after.results
    names_passes = before_results.lists_passes and after_results.lists_passes
    if after_results.ran == 0 and baseline.ran_tests and not after.timed_out and not names_passes:
        # no test ran after the change, some did before: nothing was fixed, whatever the runner says
        # (a runner that names its passes gives the tests that are gone as regressions, below)
        return Verdict(False, True, regressed=True, failing_before=tuple(before_results.with_outcome(FAILED)),
                       note="no test ran after the change, although tests ran before it")
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
                     files: Mapping[str, str] | None = None, failing_before: Iterable[str] = ()) -> list[str]:
    """The still-failing tests that look like the issue's own: testing a file the model changed
    (``test_text.py`` for ``text.py``) or a module the issue names, or naming a code name the issue
    mentions. ``files`` gives the file of a test whose id does not name it (node's TAP).

    What the issue marks as a name (``gcd()``, `` `sum` ``, ``python_programs/gcd.py``, a test id)
    ties at any length, as a whole word of the test's id; free words tie only when longer than
    three characters (``the``, ``and`` would tie everything). A test in ``failing_before`` failed
    before the model changed anything: the model touching its file does not make it the issue's;
    only the issue's own words do."""
    before = set(failing_before)
    exact, words = issue_names(issue_text)
    long_names = {name for name in exact if len(name) > 3}  # long enough to find inside a longer word too
    changed_names = {_stem(path) for path in changed}
    named_modules = {w for w in words if len(w) > 3} | exact
    related = []
    for test in still_failing:
        where = test.partition("::")[0].removesuffix(".py")
        if files and test in files:
            where += "/" + files[test]
        modules = {_strip_test(part) for part in re.split(r"[/.]", where)} - GENERIC - {"js", "ts", "mjs", "cjs"}
        module_names = named_modules if test in before else named_modules | changed_names
        tokens = id_words(test)
        if modules & module_names or tokens & exact or any(code in test.lower() for code in long_names):
            related.append(test)
    return related


def issue_names(issue_text: str) -> tuple[set[str], set[str]]:
    """(names the issue marks as code: called like ``gcd()``, backticked, snake_case, a path's module,
    a test id's function; every word of the issue), lower-cased."""
    text = issue_text.lower()
    exact = {_stem(path) for path in PATH.findall(text)}  # a path names its module, not its folders
    text = PATH.sub(" ", text)
    words = set(re.findall(r"[a-z_][a-z0-9_]*", text))
    exact |= set(re.findall(r"([a-z_][a-z0-9_]*)\s*\(", text))  # called like a function
    exact |= {word for quoted in re.findall(r"`([^`]+)`", text) for word in re.findall(r"[a-z_][a-z0-9_]*", quoted)}
    exact |= {word for word in re.findall(r"[a-z_][a-z0-9_]*", text) if "_" in word.strip("_")}
    exact |= {_strip_test(match.group(0).rsplit("::", 1)[-1]) for match in TEST_NAME.finditer(issue_text.lower())}
    return exact - GENERIC - {""}, words


def id_words(test: str) -> set[str]:
    """The whole words of a test id: each part of its path and names, with and without test_ / _test,
    and each snake_case piece (``test_gcd_of_zero`` gives gcd_of_zero, gcd, of, zero)."""
    words: set[str] = set()
    for part in re.split(r"::|[/.\[\]\s>]+", test.lower()):
        if not part:
            continue
        stripped = _strip_test(part)
        words |= {part, stripped, *[piece for piece in stripped.split("_") if piece and piece != "test"]}
    return words - GENERIC


PATH = re.compile(r"[\w.-]*[\w-]/[\w./-]*\.\w+|\b[\w-]+\.(?:py|js|ts|mjs|cjs|go|rs|rb|java)\b")
TEST_NAME = re.compile(r"(?:[\w./-]+::)*\b(?:test_\w+|\w+_test|Test\w+)\b")


def issue_named_passing(issue_text: str, baseline: TestRun | None, after: TestRun) -> list[str]:
    """Tests the issue names (``test_gcd_zero``, ``tests/test_x.py::test_y``) that pass now and did
    not pass before the change: the issue's own proof that it is fixed."""
    named = {match.group(0).rsplit("::", 1)[-1] for match in TEST_NAME.finditer(issue_text)}
    if not named or not after.passed_tests():
        return []
    before = baseline.results.outcomes if baseline is not None else {}
    found = []
    for test in after.passed_tests():
        leaf = re.split(r"::|\.", test.split("[", 1)[0])[-1]
        if leaf in named and before.get(test) != PASSED:
            found.append(test)
    return sorted(found)


FIXED, REGRESSED, UNVERIFIED = "fixed", "regressed", "unverified"


@dataclass(frozen=True)
class Conclusion:
    """What a finished change amounts to, for the exit code, the draft rule and the commit subject."""

    outcome: str  # FIXED | REGRESSED | UNVERIFIED
    reason: str  # one line for people
    named: tuple[str, ...] = ()  # tests the issue names that pass now


def conclude(baseline: TestRun | None, after: TestRun | None, issue_text: str) -> Conclusion:
    """``fixed`` only when a test that failed before passes now (or a test the issue names passes now)
    and nothing regressed; ``regressed`` when the change broke tests; ``unverified`` otherwise: no
    test ran, the runner could not be judged, or no failing test was fixed."""
    if after is None:
        return Conclusion(UNVERIFIED, "no test ran (no test command was found or configured)")
    if after.results.missing:
        return Conclusion(UNVERIFIED, f"the tests could not run: the test runner cannot import {after.results.missing}")
    judged = verdict(baseline, after)
    if judged.regressed:
        return Conclusion(REGRESSED, judged.describe() + (f" ({judged.note})" if judged.note else ""))
    if after.timed_out:
        return Conclusion(UNVERIFIED, "the tests timed out, before and after the change" if baseline is not None
                          else "the tests timed out")
    if not after.ran_tests:
        return Conclusion(UNVERIFIED, "the test command ran no tests")
    named = tuple(issue_named_passing(issue_text, baseline, after))
    if judged.fixed:
        return Conclusion(FIXED, f"fixed {count(judged.fixed, 'failing test')}, no regressions", named)
    if named:
        return Conclusion(FIXED, f"the issue's {count(named, 'test')} pass{'es' if len(named) == 1 else ''} now, "
                                 "no regressions", named)
    if judged.per_test:
        return Conclusion(UNVERIFIED, "no failing test was fixed" + ("" if judged.failing_before
                                                                      else " (no test failed before the change)"))
    if baseline is None:
        return Conclusion(UNVERIFIED, "the tests were not run before the change, so nothing shows a test was fixed")
    if not baseline.passed and baseline.ran_tests and after.passed:
        return Conclusion(FIXED, "the tests failed before the change and pass now (judged by the exit code only)")
    return Conclusion(UNVERIFIED, ("the tests passed before the change too" if baseline.passed
                                   else "the tests failed before the change and still fail")
                      + " (judged by the exit code only)")


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
