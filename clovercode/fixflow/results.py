"""Per-test results of one test run, read from what the runner leaves behind: pytest's junit XML
report, unittest's failure headers, or node's TAP. When none of them can be trusted the run is
judged by its exit code alone, and ``note`` says why."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
MAX_REPORT_BYTES = 64 * 1024 * 1024  # the report is written by code the model may have changed
PYTEST_NO_TESTS = 5  # pytest's exit code when nothing was collected


@dataclass(frozen=True)
class TestResults:
    """``outcomes`` maps a test id to passed / failed / skipped; empty with ``source`` 'exit_code'."""

    __test__ = False

    source: str  # "junit" | "unittest" | "tap" | "exit_code"
    outcomes: dict[str, str] = field(default_factory=dict)
    lists_passes: bool = True  # unittest names only its failures
    note: str = ""  # why per-test results are missing, for the summary
    files: dict[str, str] = field(default_factory=dict)  # test id -> its file, where the id does not say
    ran: int | None = None  # how many tests the runner says it ran; None: it does not say
    skipped: int = 0  # skipped tests the runner counted but did not name (unittest)
    missing: str = ""  # the runner could not start its framework: "pytest (No module named pytest)"

    @property
    def per_test(self) -> bool:
        return self.source != "exit_code"

    def with_outcome(self, outcome: str) -> list[str]:
        return sorted(test for test, result in self.outcomes.items() if result == outcome)

    def counts(self) -> dict[str, int]:
        counts = {kind: len(self.with_outcome(kind)) for kind in (PASSED, FAILED, SKIPPED)}
        if not self.lists_passes and self.ran is not None:  # unittest names only its failures: count the rest
            counts[SKIPPED] += self.skipped
            counts[PASSED] = max(self.ran - counts[FAILED] - counts[SKIPPED], 0)
        return counts


def exit_code_only(note: str) -> TestResults:
    return TestResults("exit_code", note=note)


# What Python prints when the runner's framework is not importable (``python3 -m pytest`` without pytest,
# a conftest.py or test module that imports a package the environment lacks)
NO_MODULE = re.compile(r"(?:^|\s)(?P<python>\S*python[\d.]*): No module named (?P<module>[\w.]+)", re.MULTILINE)


def runner_missing(output: str, exit_code: int | None) -> str:
    """'pytest (.venv/bin/python: No module named pytest)' when the test runner itself could not start."""
    if exit_code in (0, None):
        return ""
    found = NO_MODULE.search(output)
    if found is None:
        return ""
    return f"{found.group('module')} ({found.group('python')}: No module named {found.group('module')})"


def read_results(report: Path | None, output: str, exit_code: int | None, omitted_bytes: int,
                 root: Path) -> TestResults:
    """The best per-test results this run allows (see the module docstring)."""
    if exit_code is None:
        return exit_code_only("the tests timed out, so no per-test results were written")
    missing = runner_missing(output, exit_code)
    if missing and not (report is not None and report.is_file() and not report.is_symlink()):
        return TestResults("exit_code", note=f"the test runner could not start: it cannot import {missing}",
                           missing=missing, ran=0)
    failed = exit_code != 0
    if report is not None and report.is_symlink():
        # written by code the model may have changed: never read a host file through it
        return exit_code_only("the junit report was replaced by a symbolic link; it was not read")
    if report is not None and report.is_file():
        try:
            outcomes = parse_junit(report, root)
        except ValueError as exc:
            return exit_code_only(f"the junit report could not be read ({exc})")
        has_failures = FAILED in outcomes.values()
        if has_failures == failed or (exit_code == PYTEST_NO_TESTS and not outcomes):
            return TestResults("junit", outcomes, ran=len(outcomes))
        return exit_code_only(f"the junit report ({'some' if has_failures else 'no'} failures) disagrees with the "
                              f"exit code {exit_code}; perhaps the command runs pytest more than once")
    if omitted_bytes:
        return exit_code_only("the test output was too long to read per-test results from it")
    ran, skipped = unittest_totals(output)
    if ran == 0:  # "Ran 0 tests" then "OK" (exit 0 before Python 3.12) or "NO TESTS RAN" (exit 5)
        return TestResults("unittest", {}, lists_passes=False, ran=0, note="unittest ran no tests")
    unittest = parse_unittest(output)
    if unittest is not None and bool(unittest) == failed:
        return TestResults("unittest", unittest, lists_passes=False, ran=ran, skipped=skipped)
    tap = parse_tap(output)
    if tap is not None and (FAILED in tap.values()) == failed:
        return TestResults("tap", tap, files=tap_locations(output, root), ran=len(tap))
    return exit_code_only("the test runner's per-test results were not found (pytest, unittest and TAP are read)")


def parse_junit(path: Path, root: Path) -> dict[str, str]:
    """Test outcomes from a junit XML report, keyed by pytest-style node ids; ValueError if unreadable."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise ValueError(f"over {MAX_REPORT_BYTES // 2**20} MB")
        tree = ET.parse(path)
    except ET.ParseError as exc:
        raise ValueError(f"not valid XML: {exc}") from None
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    outcomes: dict[str, str] = {}
    for case in tree.getroot().iter("testcase"):
        name = case.get("name") or ""
        test = junit_node_id(case.get("classname") or "", name, case.get("file"), root)
        tags = {child.tag for child in case}
        outcome = FAILED if tags & {"failure", "error"} else SKIPPED if "skipped" in tags else PASSED
        # pytest writes a second entry for an error in teardown: the test failed either way
        if outcomes.get(test) != FAILED:
            outcomes[test] = outcome
    return outcomes


def junit_node_id(classname: str, name: str, file: str | None, root: Path) -> str:
    """``tests.test_x.TestY`` + ``test_z`` → ``tests/test_x.py::TestY::test_z`` (as pytest names it)."""
    if not classname:  # a collection error: the name is the module
        module = _module_file(name.split("."), root)
        return module[0] if module else name
    parts = classname.split(".")
    if file and file.endswith(".py"):
        dotted = file[:-3].replace("/", ".").replace(os.sep, ".").split(".")
        if parts[: len(dotted)] == dotted:
            return "::".join([file, *parts[len(dotted):], name])
    module = _module_file(parts, root)
    if module is None:
        return f"{classname}::{name}"
    path, rest = module
    return "::".join([path, *rest, name])


def _module_file(parts: list[str], root: Path) -> tuple[str, list[str]] | None:
    """The longest prefix of ``parts`` that names a .py file under ``root``, and what follows it."""
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).is_file():
            return path, parts[cut:]
    return None


UNITTEST_HEADER = re.compile(r"^(FAIL|ERROR): (\S+) \(([^)\s]+)\)", re.MULTILINE)
UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
UNITTEST_TOTALS = re.compile(r"^FAILED \(([^)]*)\)\s*$", re.MULTILINE)
UNITTEST_END = re.compile(r"^(?:OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?\s*$", re.MULTILINE)


def unittest_totals(output: str) -> tuple[int | None, int]:
    """(tests run, tests skipped) from unittest's last 'Ran N tests' and its 'OK (skipped=2)' line."""
    ran = UNITTEST_RAN.findall(output)
    if not ran:
        return None, 0
    skipped = 0
    for end in UNITTEST_END.finditer(output):
        for item in (end.group(1) or "").split(","):
            key, _, value = item.strip().partition("=")
            if key == "skipped" and value.isdigit():
                skipped = int(value)
    return int(ran[-1]), skipped


def parse_unittest(output: str) -> dict[str, str] | None:
    """The failing tests of a unittest run, or None unless its output is complete and consistent."""
    if not UNITTEST_RAN.search(output):
        return None
    headers = UNITTEST_HEADER.findall(output)
    totals = UNITTEST_TOTALS.search(output)
    expected = 0
    if totals:
        for item in totals.group(1).split(","):
            key, _, value = item.strip().partition("=")
            if key in ("failures", "errors") and value.isdigit():
                expected += int(value)
    if len(headers) != expected:
        return None
    failing = {}
    for _, method, where in headers:
        # Python 3.11+ writes "(module.Class.method)", older ones "(module.Class)"
        failing[where if where.endswith("." + method) else f"{where}.{method}"] = FAILED
    return failing


TAP_RESULT = re.compile(r"^(?P<indent>\s*)(?P<status>not ok|ok) \d+(?: - (?P<name>.*?))?(?P<directive> # (?:SKIP|TODO)\b.*)?$",
                        re.IGNORECASE)
TAP_SUBTEST = re.compile(r"^(?P<indent>\s*)# Subtest: (?P<name>.*)$")
TAP_PLAN = re.compile(r"^1\.\.\d+")
TAP_LOCATION = re.compile(r"^\s*location: '(?P<path>[^':]+)(?::\d+)*'\s*$")


def _tap_walk(output: str) -> Iterator[tuple[str, "re.Match[str] | None", str]]:
    """Each line of TAP output, with its result match and the test id it names (node --test nests
    subtests by four spaces; a result's id is the names of its enclosing subtests and its own)."""
    stack: list[str] = []
    for line in output.splitlines():
        subtest = TAP_SUBTEST.match(line)
        if subtest:
            depth = len(subtest.group("indent")) // 4
            del stack[depth:]
            stack.append(subtest.group("name").strip())
            yield line, None, ""
            continue
        found = TAP_RESULT.match(line)
        if not found:
            yield line, None, ""
            continue
        depth = len(found.group("indent")) // 4
        name = (found.group("name") or "").strip() or (stack[depth] if depth < len(stack) else "test")
        test = " > ".join([*stack[:depth], name])
        del stack[depth:]
        yield line, found, test


def parse_tap(output: str) -> dict[str, str] | None:
    """Leaf test outcomes from TAP, or None if not TAP."""
    if not any(TAP_PLAN.match(line) for line in output.splitlines()):
        return None  # no top-level plan: not TAP, or the run was cut short
    results: dict[str, str] = {}
    children_at: dict[int, int] = {}  # depth -> results seen at that depth since its parent's
    for _, found, test in _tap_walk(output):
        if found is None:
            continue
        depth = len(found.group("indent")) // 4
        had_children = children_at.pop(depth + 1, 0) > 0
        children_at[depth] = children_at.get(depth, 0) + 1
        if had_children:
            continue  # a suite or a file: its leaves carry the result
        directive = (found.group("directive") or "").upper()
        if "SKIP" in directive or "TODO" in directive:
            results[test] = SKIPPED
        else:
            results[test] = PASSED if found.group("status").lower() == "ok" else FAILED
    return results or None


def tap_locations(output: str, root: Path) -> dict[str, str]:
    """Test id -> project-relative file, from the ``location:`` node writes under a failed test."""
    files: dict[str, str] = {}
    last: str | None = None
    for line, found, test in _tap_walk(output):
        if found is not None:
            last = test
            continue
        location = TAP_LOCATION.match(line)
        if location and last is not None:
            path = Path(location.group("path"))
            try:
                files[last] = path.relative_to(root).as_posix()
            except ValueError:
                files[last] = path.as_posix()
    return files
