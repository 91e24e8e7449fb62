"""The test verdict of `fix`: per-test results from real runners (pytest's junit report, unittest,
node's TAP), the pure verdict, the feedback decision, the scratch directory the sandbox may write,
and the commit / pull request text that describes the whole change."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_git_repo

from clovercode.executors.local import LocalExecutor
from clovercode.fixflow.issue import Issue
from clovercode.fixflow.report import change_text, commit_message, pull_body
from clovercode.fixflow.results import exit_code_only, parse_junit, parse_tap, parse_unittest, read_results, TestResults
from clovercode.fixflow.testrun import TestCommand, TestRun, feedback_message, pytest_addopts, run_tests
from clovercode.fixflow.verdict import related_failures, verdict
from clovercode.github.refs import IssueRef, RepoRef
from clovercode.sandboxing.argv import Layout, bwrap_argv
from clovercode.sandboxing.policy import Policy

PYTEST = f"{sys.executable} -m pytest -q"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


SUITE = {
    "pkg/__init__.py": "",
    "pkg/calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": (
        "import pytest\nfrom pkg.calc import add\n\n"
        "def test_add():\n    assert add(1, 2) == 3\n\n"
        "def test_broken():\n    assert add(1, 1) == 3\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_later():\n    pass\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_param(n):\n    assert n < 2\n\n"
        "class TestGroup:\n    def test_inside(self):\n        assert True\n"),
    "tests/test_import_error.py": "import no_such_module_xyz\n\ndef test_never():\n    pass\n",
    "conftest.py": "",
}


def test_pytest_results_come_from_its_junit_report_outside_the_tree(tmp_path, monkeypatch):
    import tempfile

    root = make_git_repo(tmp_path / "proj", write(tmp_path / "src", SUITE))
    scratch_parent = tmp_path / "host-tmp"
    scratch_parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))
    run = run_tests(LocalExecutor(), root, PYTEST, 60, 0, dict(os.environ))
    assert list(scratch_parent.iterdir()) == []  # the scratch directory is gone after the run
    assert run.exit_code == 1 and run.results.source == "junit"
    assert run.results.outcomes == {
        "tests/test_calc.py::test_add": "passed",
        "tests/test_calc.py::test_broken": "failed",
        "tests/test_calc.py::test_later": "skipped",
        "tests/test_calc.py::test_param[1]": "passed",
        "tests/test_calc.py::test_param[2]": "failed",
        "tests/test_calc.py::TestGroup::test_inside": "passed",
        "tests/test_import_error.py": "failed",  # a collection error names the module
    }
    # the report and pytest's cache went to a scratch directory that is gone: nothing new in the tree
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--ignored"], capture_output=True,
                            text=True).stdout
    assert [line for line in status.splitlines() if "__pycache__" not in line] == []


def test_a_users_pytest_addopts_is_kept(tmp_path):
    opts = pytest_addopts(tmp_path / "r.xml", tmp_path, "-x --tb=short")
    assert opts.startswith("-x --tb=short --junitxml ") and "cache_dir=" in opts


def test_corrupt_or_inconsistent_reports_fall_back_to_the_exit_code(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text("<testsuites><testsuite><testcase name='a' classname='t'")
    results = read_results(report, "", 1, 0, tmp_path)
    assert results.source == "exit_code" and "not valid XML" in results.note
    report.write_text("<testsuites><testsuite><testcase name='a' classname='t'/></testsuite></testsuites>")
    results = read_results(report, "", 1, 0, tmp_path)  # all passed, yet the command failed
    assert results.source == "exit_code" and "disagrees with the exit code 1" in results.note
    assert read_results(report, "", None, 0, tmp_path).note.startswith("the tests timed out")
    assert read_results(None, "make: *** [test] Error 2", 2, 0, tmp_path).source == "exit_code"
    with pytest.raises(ValueError):
        parse_junit(tmp_path / "missing.xml", tmp_path)
    secret = tmp_path / "secret.xml"
    secret.write_text("<testsuites><testsuite><testcase name='token-abc' classname='t'/></testsuite></testsuites>")
    link = tmp_path / "link.xml"
    link.symlink_to(secret)
    results = read_results(link, "", 0, 0, tmp_path)
    assert results.source == "exit_code" and "symbolic link" in results.note and "token-abc" not in str(results)


def test_the_report_reaches_pytest_started_by_a_script(tmp_path):
    """PYTEST_ADDOPTS reaches pytest however the project starts it (here a script, as `make test` would)."""
    root = write(tmp_path, {**SUITE, "run-tests.sh": f"#!/bin/sh\nset -e\n{sys.executable} -m pytest -q \"$@\"\n"})
    run = run_tests(LocalExecutor(), root, "sh ./run-tests.sh tests/test_calc.py", 60, 0, dict(os.environ))
    assert run.results.source == "junit"
    assert run.results.with_outcome("failed") == ["tests/test_calc.py::test_broken", "tests/test_calc.py::test_param[2]"]


UNITTEST_SUITE = {
    "test_shapes.py": (
        "import unittest\n\nclass Shapes(unittest.TestCase):\n"
        "    def test_ok(self):\n        pass\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n"
        "    def test_raises(self):\n        raise RuntimeError('boom')\n"
        "    def test_sub(self):\n        for i in range(3):\n            with self.subTest(i=i):\n"
        "                self.assertLess(i, 1)\n"),
}


def test_unittest_failures_are_read_from_its_output(tmp_path):
    root = write(tmp_path, UNITTEST_SUITE)
    run = run_tests(LocalExecutor(), root, f"{sys.executable} -m unittest -q", 60, 0, dict(os.environ))
    assert run.results.source == "unittest" and not run.results.lists_passes
    assert run.results.outcomes == {"test_shapes.Shapes.test_bad": "failed", "test_shapes.Shapes.test_raises": "failed",
                                    "test_shapes.Shapes.test_sub": "failed"}
    assert parse_unittest("Ran 3 tests in 0.001s\n\nOK\n") == {}
    # a header lost to a cut log: the totals do not match, so no per-test claim is made
    assert parse_unittest("FAIL: test_a (m.C.test_a)\nRan 3 tests in 0.1s\nFAILED (failures=2)\n") is None


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_test_runner_tap(tmp_path):
    write(tmp_path, {"math.test.mjs": (
        "import test from 'node:test';\nimport assert from 'node:assert';\n"
        "test('adds', () => assert.equal(1 + 1, 2));\n"
        "test('group', async (t) => {\n  await t.test('inner ok', () => {});\n"
        "  await t.test('inner bad', () => assert.equal(1, 2));\n});\n"
        "test('skipped', { skip: true }, () => {});\n")})
    run = run_tests(LocalExecutor(), tmp_path, "node --test --test-reporter=tap", 60, 0, dict(os.environ))
    assert run.results.source == "tap", run.output
    assert run.results.outcomes == {"adds": "passed", "group > inner ok": "passed", "group > inner bad": "failed",
                                    "skipped": "skipped"}
    assert parse_tap("all good\n") is None
    # node names the file of a failed test only in its diagnostics: enough to tell it is the issue's
    assert run.results.files["group > inner bad"] == "math.test.mjs"
    assert related_failures(["group > inner bad"], "a bug", ["src/math.mjs"], run.results.files) == ["group > inner bad"]
    assert related_failures(["group > inner bad"], "a bug", ["src/other.mjs"], run.results.files) == []


def tr(outcomes: dict[str, str] | None, code: int, source: str = "junit", lists_passes: bool = True) -> TestRun:
    results = TestResults(source, outcomes, lists_passes) if outcomes is not None else exit_code_only("no report")
    return TestRun("pytest -q", code, False, 1.0, "", 0, results)


def test_verdict_is_fail_to_pass_and_pass_to_pass():
    before = tr({"t::fixed": "failed", "t::old": "failed", "t::ok": "passed", "t::gone": "passed",
                 "t::skip": "skipped", "broken.py": "failed"}, 1)
    after = tr({"t::fixed": "passed", "t::old": "failed", "t::ok": "failed", "t::new": "failed",
                "t::skip": "passed", "broken.py::t": "failed"}, 1)
    judged = verdict(before, after)
    assert judged.fixed == ("t::fixed",)
    assert judged.regressions == ("t::gone", "t::new", "t::ok")  # broke, added failing, passing test removed
    assert judged.still_failing == ("broken.py::t", "t::old")  # hidden before by its module's collection error
    assert judged.regressed and "3 regressions: t::gone, t::new, t::ok" in judged.describe()
    clean = verdict(before, tr({"t::fixed": "failed", "t::old": "failed", "t::ok": "passed", "t::gone": "passed",
                                "broken.py": "failed"}, 1))
    assert not clean.regressed and clean.fixed == () and "no failing test was fixed" in clean.describe()


def test_verdict_without_per_test_results_or_baseline():
    assert verdict(tr(None, 0), tr(None, 1)).regressed  # passed before, fails now
    coarse = verdict(tr(None, 1), tr(None, 1))
    assert not coarse.regressed and not coarse.per_test and "failed before the change too" in coarse.describe()
    assert verdict(None, tr(None, 1)).regressed and not verdict(None, tr(None, 0)).regressed
    # unittest names only failures: one that stopped failing is fixed
    fixed = verdict(tr({"m.C.a": "failed", "m.C.b": "failed"}, 1, "unittest", False),
                    tr({"m.C.b": "failed"}, 1, "unittest", False))
    assert fixed.fixed == ("m.C.a",) and fixed.still_failing == ("m.C.b",) and not fixed.regressed


def test_related_failures_are_the_issues_own():
    still = ["tests/test_text.py::test_slugify_punctuation", "tests/test_inventory.py::test_restock_cap",
             "tests/test_dates.py::test_week_number"]
    assert related_failures(still, "slugify() keeps a trailing dash", ["shopkit/other.py"]) == [still[0]]
    assert related_failures(still, "a bug", ["shopkit/inventory.py"]) == [still[1]]
    assert related_failures(still, "a bug", []) == []


def test_names_the_issue_marks_as_code_tie_at_any_length():
    still = ["test_gcd.py::test_gcd", "test_misc.py::test_summary_line", "test_sum.py::test_sum_empty",
             "python_programs/test_lcm.py::test_lcm", "t.py::test_max_of_list", "t.py::test_maximum"]
    # before: names of three letters or fewer never tied, so gcd_loop got no feedback round
    assert related_failures(still, "gcd() never returns", []) == ["test_gcd.py::test_gcd"]
    assert related_failures(still, "`sum` of nothing is 0", []) == ["test_sum.py::test_sum_empty"]  # not test_summary
    assert related_failures(still, "python_programs/gcd.py loops", []) == ["test_gcd.py::test_gcd"]  # not the folder
    assert related_failures(still, "max() is off by one", []) == ["t.py::test_max_of_list"]
    assert related_failures(still, "see test_gcd", []) == ["test_gcd.py::test_gcd"]
    assert related_failures(still, "the sum is off and max is too", []) == []  # free short words stay free


def test_a_suite_that_finished_before_and_hangs_after_is_a_regression():
    before = tr({"t::a": "failed", "t::b": "passed"}, 1)
    hung = TestRun("pytest -q", None, True, 60.0, "", 0, exit_code_only("the tests timed out"))
    judged = verdict(before, hung)
    assert judged.regressed and "hang after the change" in judged.describe()
    from clovercode.fixflow.verdict import REGRESSED, conclude

    assert conclude(before, hung, "gcd() loops").outcome == REGRESSED  # before: unverified, "before and after"
    slow_before = TestRun("pytest -q", None, True, 60.0, "", 0, exit_code_only("the tests timed out"))
    assert not verdict(slow_before, hung).regressed


def test_feedback_names_regressions_and_lists_old_failures_apart():
    run = TestRun("pytest -q", 1, False, 1.0, "FAILED tests/test_money.py::test_price", 0)
    text = feedback_message(run, 1, 3, ["tests/test_money.py::test_price"], ["tests/test_text.py::test_slug"],
                            ["tests/test_dates.py::test_week"])
    assert "passed before your change and fail now (regressions; fix them first):\n- tests/test_money.py::test_price" in text
    assert "about the issue and still fail:\n- tests/test_text.py::test_slug" in text
    assert "already failed before your change and look unrelated" in text and "- tests/test_dates.py::test_week" in text
    assert "already failed" not in feedback_message(run, 2, 3, ["tests/test_money.py::test_price"])


def test_scratch_directories_are_writable_binds_after_the_private_tmp():
    policy = Policy("workspace-write", "test", project_writable=True, network=False)
    layout = Layout(project="/p", cwd="/p", masked=("/run",), writable=("/tmp/clovercode-tests-x",))
    assert bwrap_argv(policy, layout, ["true"]) == [
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net",
        "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--tmpfs", "/run",
        "--bind", "/tmp/clovercode-tests-x", "/tmp/clovercode-tests-x",
        "--bind", "/p", "/p",
        "--chdir", "/p", "--", "true",
    ]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_junit_report_comes_out_of_the_real_sandbox(tmp_path):
    from clovercode.executors.bwrap import BwrapExecutor
    from clovercode.sandboxing.policy import load_policy

    root = make_git_repo(tmp_path / "proj", write(tmp_path / "src", SUITE))
    executor = BwrapExecutor(load_policy("workspace-write"), root, dict(os.environ), 30000)
    run = run_tests(executor, root, PYTEST, 120, -1, dict(os.environ))
    assert run.results.source == "junit", run.output
    assert run.results.with_outcome("failed") == ["tests/test_calc.py::test_broken", "tests/test_calc.py::test_param[2]",
                                                  "tests/test_import_error.py"]
    assert executor.writable == ()  # the scratch bind was for that one run only
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--ignored"], capture_output=True,
                            text=True).stdout
    assert [line for line in status.splitlines() if "__pycache__" not in line] == []


def test_commit_and_pull_request_describe_every_round():
    issue = Issue("slugify keeps a trailing dash", "", IssueRef(RepoRef("o", "r"), 5))
    summaries = [(0, "slugify() now strips dashes at both ends, so 'Hello!' gives 'hello'."),
                 (1, "Restored format_price(), which the first round had broken."),
                 (2, "Restored format_price(), which the first round had broken.")]
    before = tr({"tests/test_text.py::test_slug": "failed", "tests/test_dates.py::test_week": "failed",
                 "tests/test_money.py::test_price": "passed"}, 1)
    after = tr({"tests/test_text.py::test_slug": "passed", "tests/test_dates.py::test_week": "failed",
                "tests/test_money.py::test_price": "passed"}, 1)
    runs = [TestRun("pytest -q", 1, False, 1.0, "", 0), TestRun("pytest -q", 1, False, 1.0, "", 1)]
    judged = verdict(before, after)
    message = commit_message(issue, summaries, TestCommand("pytest -q", "d"), runs, "#5", judged)
    flat = " ".join(message.split())
    assert "slugify() now strips dashes at both ends" in flat
    assert "After round 1 of test feedback: Restored format_price()" in flat
    assert flat.count("Restored format_price()") == 1  # a repeated summary adds nothing
    # every test named, one per line (issue 26: never "and 1 more", never cut inside an id)
    assert "Fixed (failed before, pass now):\n  - tests/test_text.py::test_slug\n" in message
    assert "Still failing (failed before the change too):\n  - tests/test_dates.py::test_week\n" in message
    assert "Regressions" not in message
    assert all(len(line) <= 72 for line in message.splitlines())
    body = pull_body(issue, summaries, TestCommand("pytest -q", "d"), runs, [], "#5", "m", 3, judged)
    assert "slugify() now strips dashes" in body and "After round 1 of test feedback" in body
    assert "- Fixed (failed before, pass now): `tests/test_text.py::test_slug`." in body and "draft" not in body
    assert change_text(None) == "The model gave no summary." and change_text("just one") == "just one"


def test_the_baseline_runs_first_and_its_time_comes_out_of_the_first_rounds_budget(tmp_path):
    from rich.console import Console

    from clovercode.backends.replay import ReplayBackend
    from clovercode.ground.config import load_config
    from clovercode.fixflow.rounds import run_rounds
    from clovercode.wiring.session import Session

    fixtures = Path(__file__).resolve().parent / "fixtures"
    work = make_git_repo(tmp_path / "durations", fixtures / "durations")
    cfg = load_config(work, {}, {"sandbox": "none", "trajectory_dir": str(tmp_path / "traj"), "max_time": 30})
    budgets = []

    class Watched(Session):
        def run_task(self, task, sink=None, *, follow_up=False):
            budgets.append((self.cfg["max_time"], (work / "durations.py").read_text().count("seconds // 60")))
            return super().run_task(task, sink, follow_up=follow_up)

    session = Watched(work, cfg, ReplayBackend(fixtures / "durations.replay.jsonl"), LocalExecutor(), False, {})
    command = TestCommand(f"sleep 1.2; {sys.executable} -m pytest -q", "test")
    rounds = run_rounds(session, "fix format_duration", command, 3, 60, None, Console(file=open(os.devnull, "w")),
                        lambda result: bool(result.changed))
    assert rounds.baseline.round == -1 and rounds.baseline.results.with_outcome("failed") == [
        "test_durations.py::FormatTest::test_hours_and_minutes", "test_durations.py::FormatTest::test_round_trip"]
    [(budget, bug_present)] = budgets
    assert bug_present == 1  # the baseline saw the tree before the model's change
    assert 30 - rounds.baseline.seconds - 0.5 < budget <= 30 - rounds.baseline.seconds and rounds.baseline.seconds >= 1.2
    assert session.cfg["max_time"] == 30  # restored for later rounds
    assert rounds.verdict.fixed == ("test_durations.py::FormatTest::test_hours_and_minutes",
                                    "test_durations.py::FormatTest::test_round_trip")
    # with fix.baseline off nothing runs before, and any failure counts (the old rule)
    budgets.clear()
    work2 = make_git_repo(tmp_path / "durations2", fixtures / "durations")
    session = Watched(work2, cfg, ReplayBackend(fixtures / "durations.replay.jsonl"), LocalExecutor(), False, {})
    rounds = run_rounds(session, "fix", TestCommand("true", "t"), 3, 60, None, Console(file=open(os.devnull, "w")),
                        lambda result: bool(result.changed), baseline=False)
    assert rounds.baseline is None and not rounds.verdict.baseline
    assert [29 < b <= 30 for b, _ in budgets] == [True]  # what is left of --max-time: all of it, less a moment


def test_no_fixed_test_is_said_plainly():
    from clovercode.fixflow.report import verdict_lines

    green = tr({"t::a": "passed"}, 0)
    judged = verdict(green, tr({"t::a": "passed"}, 0))
    assert judged.fixed == () and not judged.regressed
    assert verdict_lines(judged)[0] == "No failing test was fixed by this change: no test failed before it (none shows the fix)."
    assert "no failing test was fixed (none failed before); no regressions" == judged.describe()
    assert verdict_lines(verdict(tr({"t::a": "failed"}, 1), tr({"t::a": "failed"}, 1)))[0] == \
        "No failing test was fixed by this change."


def test_a_round_that_stops_without_finish_is_still_described(tmp_path):
    import json

    from rich.console import Console

    from clovercode.backends.replay import ReplayBackend
    from clovercode.ground.config import load_config
    from clovercode.fixflow.rounds import run_rounds
    from clovercode.wiring.session import Session

    fixtures = Path(__file__).resolve().parent / "fixtures"
    turns = [line for line in (fixtures / "durations-feedback.replay.jsonl").read_text().splitlines()][:4]
    turns += [turns[3], turns[3]]  # round 1 only looks around until its step budget runs out
    model = tmp_path / "stuck.jsonl"
    model.write_text("\n".join(turns) + "\n")
    work = make_git_repo(tmp_path / "durations", fixtures / "durations")
    cfg = load_config(work, {}, {"sandbox": "none", "trajectory_dir": str(tmp_path / "traj"), "max_steps": 3})
    session = Session(work, cfg, ReplayBackend(model), LocalExecutor(), False, {})
    rounds = run_rounds(session, "format_duration(5400) gives 1h90m", TestCommand(PYTEST, "t"), 3, 60, None,
                        Console(file=open(os.devnull, "w")), lambda result: bool(result.changed))
    assert [r.round for r in rounds.tests] == [0, 1] and rounds.verdict.regressions == (
        "test_durations.py::FormatTest::test_seconds_only",)
    assert rounds.summaries[0] == (0, json.loads(turns[2])["text"].split("<parameter=summary>\n")[1].split("\n</parameter>")[0])
    assert rounds.summaries[1][0] == 1 and rounds.summaries[1][1].startswith("The model stopped without a summary of this round")
    issue = Issue("format_duration(5400) gives 1h90m", "")
    message = commit_message(issue, rounds.summaries, TestCommand(PYTEST, "t"), rounds.tests, None, rounds.verdict)
    assert "After round 1 of test feedback: The model stopped without a summary" in " ".join(message.split())
