"""The project's tests: which command runs them, running it in the sandbox, and the feedback text."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from clovercode.ground.errors import UsageError
from clovercode.executors.base import Executor, with_writable
from clovercode.fixflow.results import FAILED, PASSED, TestResults, exit_code_only, read_results
from clovercode.trust.projectview import ProjectView

FEEDBACK_TAIL_CHARS = 6000  # the end of a test log holds the failures and the summary
REPORT_TAIL_CHARS = 3000
NPM_PLACEHOLDER = "no test specified"  # what `npm init` writes into scripts.test
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist", "target"}


@dataclass(frozen=True)
class TestCommand:
    __test__ = False  # not a pytest test class

    command: str
    source: str  # where it came from, for the summary: "setting fix.test_command", "detected: go.mod", ...


@dataclass(frozen=True)
class TestRun:
    __test__ = False

    command: str
    exit_code: int | None
    timed_out: bool
    seconds: float
    output: str
    round: int  # 0: after the model's first finish; n: after the n-th round of feedback; -1: the baseline
    results: TestResults = field(default_factory=lambda: exit_code_only("per-test results were not read"))

    @property
    def passed(self) -> bool:
        """Exit code 0, in time, and at least one test ran (zero tests that "pass" show nothing)."""
        return self.exit_code == 0 and not self.timed_out and self.ran_tests

    @property
    def ran_tests(self) -> bool:
        return self.results.ran != 0 and not self.results.missing

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.results.missing:
            return f"could not run: the runner cannot import {self.results.missing} (exit code {self.exit_code})"
        if not self.ran_tests:
            return f"ran no tests (exit code {self.exit_code}, {self.seconds:.1f} s)"
        return f"{'passed' if self.passed else 'failed'} (exit code {self.exit_code}, {self.seconds:.1f} s)"

    def passed_tests(self) -> list[str]:
        return self.results.with_outcome(PASSED) if self.exit_code is not None else []

    def tail(self, chars: int = REPORT_TAIL_CHARS) -> str:
        text = self.output.rstrip()
        return text if len(text) <= chars else "…" + text[-chars:]

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "exit_code": self.exit_code, "passed": self.passed, "timed_out": self.timed_out,
                "seconds": round(self.seconds, 3), "round": self.round, "results": self.results.source,
                "counts": self.results.counts() if self.results.per_test else None, "ran": self.results.ran,
                "runner_missing": self.results.missing or None,
                "failing": self.results.with_outcome(FAILED), "output_tail": self.tail()}


def configured_test_command(value: str, source: str) -> TestCommand | None | str:
    """The ``fix.test_command`` setting: a command, None for 'none', or the string 'detect'."""
    stripped = value.strip()
    if not stripped:
        return "detect"
    if stripped.lower() == "none":
        return None
    return TestCommand(stripped, f"fix.test_command from {source}")


def detect_test_command(root: Path, python_has_pytest: Callable[[], bool] | None = None) -> TestCommand | None:
    """The conventional test command of the project at ``root``, judged from its files; None if none fits."""
    for name in ("Makefile", "makefile", "GNUmakefile"):
        text = _read(root / name)
        if text is not None and re.search(r"^test\s*:(?!=)", text, re.MULTILINE):
            return TestCommand("make test", f"detected: `test` target in {name}")
    package = _read(root / "package.json")
    if package is not None:
        try:
            script = (json.loads(package).get("scripts") or {}).get("test")
        except (json.JSONDecodeError, AttributeError):
            script = None
        if isinstance(script, str) and script.strip() and NPM_PLACEHOLDER not in script:
            return TestCommand("npm test", "detected: scripts.test in package.json")
    if (root / "Cargo.toml").is_file():
        return TestCommand("cargo test", "detected: Cargo.toml")
    if (root / "go.mod").is_file():
        return TestCommand("go test ./...", "detected: go.mod")
    reason = _python_tests(root)
    if reason:
        for venv in (".venv", "venv"):
            if (root / venv / "bin" / "python").is_file():
                return TestCommand(f"{venv}/bin/python -m pytest -q", f"detected: {reason}, project virtualenv {venv}/")
        has_pytest = python_has_pytest or system_python_has_pytest
        if has_pytest():
            return TestCommand("python3 -m pytest -q", f"detected: {reason}")
        if reason.startswith(PYTEST_REASONS):  # unittest would run none of them and print OK
            raise UsageError(f"the project's tests use pytest ({reason}), but python3 cannot import pytest",
                             hint="Install pytest for python3, add a .venv/ with it, or name the command "
                                  "with --test-command (fix.test_command).")
        return TestCommand("python3 -m unittest -q", f"detected: {reason} (pytest is not installed: unittest)")
    return None


PYTEST_REASONS = ("pytest configuration", "[tool.pytest]")


def _python_tests(root: Path) -> str | None:
    for name in ("pytest.ini", "conftest.py"):
        if (root / name).is_file():
            return f"pytest configuration ({name})"
    if "[tool.pytest" in (_read(root / "pyproject.toml") or ""):
        return "[tool.pytest] in pyproject.toml"
    if "[tool:pytest]" in (_read(root / "setup.cfg") or ""):
        return "pytest configuration (setup.cfg)"
    if "[pytest]" in (_read(root / "tox.ini") or ""):
        return "pytest configuration (tox.ini)"
    for path in _walk(root, depth=4):
        if re.fullmatch(r"test_.*\.py|.*_test\.py", path.name):
            return f"Python tests ({path.relative_to(root).as_posix()})"
    return None


def _walk(root: Path, depth: int, view: ProjectView | None = None, rel: str = "."):
    """Files up to ``depth`` directories down, through the project view (a link out is not followed)."""
    view = view or ProjectView(root)
    try:
        entries = view.listdir(rel)
    except OSError:
        return
    for name, kind in entries:
        if kind == "file":
            yield root / rel / name if rel != "." else root / name
    if depth > 1:
        for name, kind in entries:
            sub = name if rel == "." else f"{rel}/{name}"
            if kind == "dir" and not (root / sub).is_symlink() and name not in SKIP_DIRS and not name.startswith("."):
                yield from _walk(root, depth - 1, view, sub)


def _read(path: Path) -> str | None:
    """A project file's text (``path`` is the project root joined with a file name), through the view."""
    try:
        view = ProjectView(path.parent)
        return view.read_bytes(path.name).decode("utf-8", errors="replace") if view.kind(path.name) == "file" else None
    except OSError:
        return None


def system_python_has_pytest() -> bool:
    """Whether ``python3`` on PATH can import pytest (isolated mode, run from /: no project code is imported)."""
    python = shutil.which("python3")
    if not python:
        return False
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pytest') is None)"
    try:
        return subprocess.run([python, "-I", "-c", probe], cwd="/", capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_tests(executor: Executor, root: Path, command: str, timeout: float, round_: int,
              env: Mapping[str, str] | None = None) -> TestRun:
    """Run the test command through the session's executor, so it is sandboxed like the model's commands.

    pytest is asked, through PYTEST_ADDOPTS (so `make test` or tox reach it too), for a junit report
    and its cache in a temporary directory outside the project, which the sandbox may write and
    which is removed afterwards: the user's tree gets no report files.
    """
    scratch = Path(tempfile.mkdtemp(prefix="clovercode-tests-")).resolve()
    try:
        report = scratch / "junit.xml"
        run_env = dict(os.environ if env is None else env)
        run_env["PYTEST_ADDOPTS"] = pytest_addopts(report, scratch, run_env.get("PYTEST_ADDOPTS", ""))
        result = with_writable(executor, [scratch]).run(command, root, timeout, run_env)
        results = read_results(report, result.output, None if result.timed_out else result.exit_code,
                               result.omitted_bytes, root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TestRun(command, result.exit_code, result.timed_out, result.seconds, result.output, round_, results)


def pytest_addopts(report: Path, scratch: Path, existing: str = "") -> str:
    """The user's own PYTEST_ADDOPTS, then ours: xunit1 records each test's file, so node ids are exact;
    the cache (--lf and friends) goes to the scratch directory instead of .pytest_cache in the tree."""
    # A module that fails to import would otherwise stop the whole run: nothing to compare then.
    ours = ["--junitxml", str(report), "-o", "junit_family=xunit1", "-o", f"cache_dir={scratch / 'pytest-cache'}",
            "--continue-on-collection-errors"]
    return " ".join(part for part in (existing.strip(), shlex.join(ours)) if part)


def feedback_message(run: TestRun, round_: int, rounds: int, regressions: Iterable[str] = (),
                     related: Iterable[str] = (), pre_existing: Iterable[str] = (),
                     failed_before: Iterable[str] = ()) -> str:
    """What the model reads when its finished change still fails the tests.

    ``pre_existing`` (failures from before the change that look unrelated) is given in the first
    round only, so the model does not chase them and is not told about them again and again. A
    related test in ``failed_before`` is never called the issue's without saying it failed before
    the change too.
    """
    status = f"timed out after {run.seconds:.0f} s" if run.timed_out else f"exit code {run.exit_code}"
    regressions, pre_existing, before = list(regressions), list(pre_existing), set(failed_before)
    related_old = [t for t in related if t in before]
    related = [t for t in related if t not in before]
    lines = [f"The project's tests fail after your changes (feedback round {round_} of {rounds}).",
             f"Command: `{run.command}` ({status})"]
    if regressions:
        lines.append("These tests passed before your change and fail now (regressions; fix them first):\n"
                     + _bullets(regressions))
    if related:
        lines.append("These tests are about the issue and still fail:\n" + _bullets(related))
    if related_old:
        lines.append("These tests look related to the issue (they name what it names) and still fail; they "
                     "failed before your change too, so they may be what the issue asks to fix, or someone "
                     "else's failure:\n" + _bullets(related_old))
    if pre_existing:
        lines.append("These tests already failed before your change and look unrelated to the issue; "
                     "leave them alone unless the issue is about them:\n" + _bullets(pre_existing))
    lines.append(f"Output (the last part):\n```\n{run.tail(FEEDBACK_TAIL_CHARS)}\n```")
    lines.append("Find the cause and fix the code (change a test only if the test itself is wrong), "
                 "then call finish again with a summary of what you changed in this round.")
    return "\n".join(lines)


def _bullets(tests: list[str], limit: int = 30) -> str:
    shown = [f"- {test}" for test in tests[:limit]]
    if len(tests) > limit:
        shown.append(f"- … and {len(tests) - limit} more")
    return "\n".join(shown)
