"""Verdicts that never overclaim (issue 26), tried as a CI bot's operator would: real git
repositories (a QuixBugs-like pytest project, a `python -m unittest` project), the real CLI in a
subprocess, replays standing in for the model, the fake GitHub for the pull request's draft state.

- zero tests ran is not "passed"; a pytest project on a python3 without pytest is an error that
  names the runner and what is missing, and a runner that cannot import its framework is unverified;
- `fixed` (exit 0, a ready pull request) only when a failing test passes now; a change that fixes
  nothing is `unverified` (exit 9, a draft);
- failures from before the change are never called "about the issue" without saying so;
- `--json` answers a SIGTERM in the first moments and a bad flag value;
- the commit message is the whole change; the console keeps parametrized ids whole.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo, run_cli
from conftest import tool_call_text as call, write_replay as replay
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

PYTEST = f"{sys.executable} -m pytest -q"
TOKEN = "ghs_valid_token"

GCD = {
    "gcd.py": ('def gcd(a, b):\n'
               '    """Greatest common divisor."""\n'
               '    if b == 0:\n        return a\n'
               '    return gcd(a % b, b)  # bug: the arguments are swapped\n'),
    "sieve.py": ('def sieve(n):\n    return [p for p in range(2, n + 1) if all(p % d for d in range(2, p))]\n'),
    "NOTES.md": "notes\n",
    "test_gcd.py": ('import pytest\n\nfrom gcd import gcd\n\n\n'
                    '@pytest.mark.parametrize("a, b, want", [(35, 21, 7), (13, 13, 13)], ids=["small", "same"])\n'
                    'def test_gcd_finds_the_greatest_common_divisor_of_two_numbers(a, b, want):\n'
                    '    assert gcd(a, b) == want\n\n\n'
                    'def test_gcd_of_zero():\n    assert gcd(5, 0) == 5\n'),
    "test_sieve.py": "from sieve import sieve\n\n\ndef test_sieve():\n    assert sieve(11) == [2, 3, 5, 7, 11]\n",
}
GCD_TITLE = "gcd() never returns for most inputs"
GCD_BODY = "`gcd(35, 21)` recurses until the stack runs out; it should give 7."

STATS = {
    "stats.py": ('def mean(xs):\n    return sum(xs) // len(xs)  # bug: floor division\n\n\n'
                 'def median(xs):\n    xs = sorted(xs)\n    return xs[len(xs) // 2]  # known bug: even lengths\n\n\n'
                 'def total(xs):\n    return sum(xs)\n'),
    "test_stats.py": ('import unittest\n\nfrom stats import mean, median, total\n\n\n'
                      'class StatsTest(unittest.TestCase):\n'
                      '    def test_mean(self):\n        self.assertEqual(mean([1, 2]), 1.5)\n\n'
                      '    def test_median_odd(self):\n        self.assertEqual(median([3, 1, 2]), 2)\n\n'
                      '    def test_median_even(self):\n        self.assertEqual(median([1, 2, 3, 4]), 2.5)\n\n'
                      '    def test_total(self):\n        self.assertEqual(total([1, 2]), 3)\n\n'
                      '    def test_total_empty(self):\n        self.assertEqual(total([]), 0)\n\n\n'
                      'if __name__ == "__main__":\n    unittest.main()\n'),
}




def project(tmp_path: Path, files: dict[str, str], name: str) -> Path:
    source = tmp_path / f"{name}-src"
    for rel, text in files.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    return make_git_repo(tmp_path / name, source)


def fix(work: Path, model: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json", *args,
                   env=env or cli_env(), timeout=300)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


DOCSTRING_ONLY = call("view_file", path="gcd.py"), call("edit_file", path="gcd.py", old_text='    """Greatest common divisor."""',
                      new_text='    """Greatest common divisor of a and b (Euclid)."""')
REAL_FIX = call("view_file", path="gcd.py"), call("edit_file", path="gcd.py", old_text="    return gcd(a % b, b)  # bug: the arguments are swapped",
                new_text="    return gcd(b, a % b)")


def python_without_pytest(tmp_path: Path) -> Path:
    """A real python3 (a venv of this interpreter, without site-packages) that cannot import pytest."""
    target = tmp_path / "bare-python"
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(target)
    bin_dir = target / "bin"
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(bin_dir / "python")
    probe = subprocess.run([str(bin_dir / "python3"), "-c", "import pytest"], capture_output=True)
    assert probe.returncode != 0
    return bin_dir


# -- 1. zero tests, a runner without its framework ------------------------------------------------------

def test_a_pytest_project_on_a_python3_without_pytest_is_an_error_naming_the_runner(tmp_path):
    files = {**GCD, "conftest.py": ""}
    work = project(tmp_path, files, "gcd")
    bin_dir = python_without_pytest(tmp_path)
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, call("finish", summary="Swapped the arguments back."))
    env = cli_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc, result = fix(work, model, GCD_TITLE, env=env)
    # before: detected as `python3 -m unittest -q`, 0 tests ran, "OK", tests.passed true, exit 0
    assert proc.returncode == 2, proc.stderr
    assert result["status"] == "error" and "pytest" in result["error"] and "conftest.py" in result["error"]
    assert "python3 cannot import pytest" in result["error"]
    assert git(work, "status", "--porcelain") == ""  # refused before the model ran


def test_a_runner_that_cannot_import_its_framework_is_unverified(tmp_path, fake_github):  # noqa: F811
    work = project(tmp_path, GCD, "gcd")
    bin_dir = python_without_pytest(tmp_path)
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, call("finish", summary="Swapped the arguments back."))
    proc, result = fix(work, model, GCD_TITLE, "--test-command", f"{bin_dir / 'python3'} -m pytest -q")
    assert proc.returncode == 9, proc.stderr
    tests = result["tests"]
    assert result["status"] == "unverified" and tests["passed"] is False and tests["outcome"] == "unverified"
    assert "cannot import pytest" in tests["reason"] and "No module named pytest" in tests["reason"]
    assert tests["runs"][-1]["runner_missing"].startswith("pytest")
    assert not git(work, "log", "-1", "--format=%s", result["branch"]).startswith("Fix")


def test_zero_tests_that_print_ok_are_not_a_pass(tmp_path):
    # the tests live where `python -m unittest` does not look: it runs 0 tests and says OK
    files = {"gcd.py": GCD["gcd.py"], "checks/gcd_checks.py": "import unittest\n\nclass T(unittest.TestCase):\n"
                                                                 "    def test_x(self):\n        pass\n"}
    work = project(tmp_path, files, "gcd")
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, call("finish", summary="Swapped the arguments back."))
    proc, result = fix(work, model, GCD_TITLE, "--test-command", f"{sys.executable} -m unittest -q")
    assert proc.returncode == 9, proc.stderr
    tests = result["tests"]
    assert tests["passed"] is False and tests["runs"][-1]["ran"] == 0  # was: passed true
    assert result["status"] == "unverified" and tests["reason"] == "the test command ran no tests"
    assert "ran no tests" in proc.stderr


# -- 2. fixed only when a test shows it; a draft otherwise -----------------------------------------------

@pytest.fixture
def gcd_origin(tmp_path, fake_github):  # noqa: F811
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    work = project(tmp_path, GCD, "gcd")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/quix")
    fake_github.add_issue("octo/quix", 4, GCD_TITLE, GCD_BODY)
    return work, fake_github


def fix_pr(work: Path, github, model: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = cli_env(GITHUB_TOKEN=TOKEN, CLOVERCODE_GITHUB_API_URL=github.url)
    return fix(work, model, "--github-issue", "octo/quix#4", "--pr", "--test-command", PYTEST, *args, env=env)


def test_a_change_that_fixes_nothing_is_unverified_and_a_draft(gcd_origin, tmp_path):
    work, github = gcd_origin
    model = replay(tmp_path / "m.jsonl", *DOCSTRING_ONLY, call("finish", summary="Documented gcd."),
                   call("finish", summary="Documented gcd."), call("finish", summary="Documented gcd."),
                   call("finish", summary="Documented gcd."))
    proc, result = fix_pr(work, github, model)
    # before: exit 0 "fixed", tests.fixed == [], a ready pull request
    assert proc.returncode == 9, proc.stderr
    assert result["status"] == "unverified" and result["exit_code"] == 9
    assert result["tests"]["fixed"] == [] and result["tests"]["outcome"] == "unverified"
    assert result["tests"]["reason"] == "no failing test was fixed"
    assert result["pull_request"]["draft"] is True and github.pulls[0].draft is True
    [create] = github.calls("pulls/create")
    assert create.body["title"].startswith("Attempt #4 (unverified): ") and create.body["draft"] is True
    assert "so this pull request is a draft" in create.body["body"]
    subject = git(work, "log", "-1", "--format=%s", result["branch"]).strip()
    assert subject == f"Attempt #4 (unverified): {GCD_TITLE}"
    assert "Outcome: unverified" in proc.stderr


def test_a_real_fix_is_fixed_and_ready(gcd_origin, tmp_path):
    work, github = gcd_origin
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, call("finish", summary="gcd recursed with swapped arguments."))
    proc, result = fix_pr(work, github, model)
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "fixed" and result["tests"]["outcome"] == "fixed"
    assert "test_gcd.py::test_gcd_finds_the_greatest_common_divisor_of_two_numbers[small]" in result["tests"]["fixed"]
    assert github.pulls[0].draft is False
    assert git(work, "log", "-1", "--format=%s", result["branch"]).strip() == f"Fix #4: {GCD_TITLE}"
    # the console keeps the parametrized ids whole: rich markup would eat "[small]" and "[same]"
    assert "test_gcd_finds_the_greatest_common_divisor_of_two_numbers[small]" in proc.stderr
    assert "test_gcd_finds_the_greatest_common_divisor_of_two_numbers[same]" in " ".join(proc.stderr.split())


def test_a_regressing_commit_never_says_fix(gcd_origin, tmp_path):
    work, github = gcd_origin
    breaks = call("view_file", path="sieve.py"), call("edit_file", path="sieve.py", old_text="range(2, n + 1)", new_text="range(2, n)")
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, *breaks, call("finish", summary="Fixed gcd; tidied sieve."))
    proc, result = fix_pr(work, github, model, "--test-rounds", "0")
    assert proc.returncode == 1, proc.stderr
    assert result["status"] == "tests_failed" and result["tests"]["regressions"] == ["test_sieve.py::test_sieve"]
    assert git(work, "log", "-1", "--format=%s", result["branch"]).strip() == f"Attempt #4 (breaks tests): {GCD_TITLE}"
    assert github.pulls[0].draft is True


# -- 3. failures from before are not "about the issue" --------------------------------------------------

def test_pre_existing_failures_are_not_fed_back_as_the_issues(tmp_path):
    work = project(tmp_path, STATS, "stats")
    still_wrong = call("view_file", path="stats.py"), call("edit_file", path="stats.py", old_text="    return sum(xs) // len(xs)  # bug: floor division",
                       new_text="    return sum(xs) // len(xs)  # floor division, see the issue")
    model = replay(tmp_path / "m.jsonl", *still_wrong, call("finish", summary="Looked at mean."),
                   call("finish", summary="Looked again."), call("finish", summary="And again."),
                   call("finish", summary="Once more."))
    proc, result = fix(work, model, "mean() floors its result\n\n`mean([1, 2])` gives 1, not 1.5.",
                       "--test-command", f"{sys.executable} -m unittest -q")
    assert proc.returncode == 9, proc.stderr
    text = Path(result["trajectory"]).read_text()
    # test_median_even failed before the change and is not the issue's: never "about the issue"
    feedback = [json.loads(line) for line in text.splitlines() if "feedback round" in line]
    assert feedback, "the still-failing test_mean should come back to the model"
    for event in feedback:
        message = json.dumps(event)
        about = message.split("These tests are about the issue and still fail", 1)
        assert len(about) == 1 or "test_median_even" not in about[1].split("\\n\\n")[0]
        assert "test_mean" in message and "failed before your change too" in message
    # unittest counts: 5 tests ran, 2 failed (mean, median_even), 3 passed (was: 0 passed)
    assert result["tests"]["runs"][-1]["counts"] == {"passed": 3, "failed": 2, "skipped": 0}


# -- 4. JSON on every exit path ------------------------------------------------------------------------

def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) & (1 << (signum - 1)))


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3, 0.6, 1.0])
def test_sigterm_while_starting_still_prints_one_json_object(tmp_path, delay):
    """From the moment Python runs clovercode's first line (the handler is there: /proc says so), plus
    ``delay``: loading the CLI, parsing flags, importing fix. Before, the first ~1.5 s gave no JSON."""
    work = project(tmp_path, GCD, "gcd")
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, call("finish", summary="s"))
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "--repo", str(work), "--sandbox", "none",
                             "--model", f"replay:{model}", "--test-command", PYTEST, "--json", GCD_TITLE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=work)
    deadline = time.monotonic() + 60
    while not catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal")
    assert proc.returncode == 143, err
    [line] = out.splitlines()
    answer = json.loads(line)
    assert answer["status"] == "interrupted" and answer["exit_code"] == 143
    assert "SIGTERM" in (answer.get("error") or answer.get("detail") or "")
    assert "Traceback" not in err


@pytest.mark.parametrize("command, flag, shape", [("fix", "--test-rounds", "status"), ("exec", "--max-steps", "type")])
def test_a_bad_flag_value_with_json_prints_json(tmp_path, command, flag, shape):
    proc = run_cli(command, "--json", flag, "many", "a task", cwd=tmp_path)
    assert proc.returncode == 2
    objects = [json.loads(line) for line in proc.stdout.splitlines()]
    if command == "exec":  # JSON Lines: run_started, the error, run_completed (docs/usage.md#json-events)
        assert [o["type"] for o in objects] == ["run_started", "error", "run_completed"]
        objects = objects[1:2]
    [answer] = objects
    assert answer["exit_code"] == 2 and flag in (answer.get("error") or answer.get("message"))
    assert answer[shape] == "error"


# -- 5. the commit message is the whole change --------------------------------------------------------

def test_the_commit_message_is_the_whole_change(tmp_path):
    files = dict(GCD)
    long_id_test = ("def test_gcd_of_two_numbers_that_share_no_common_factor_whatsoever_is_one_every_time():\n"
                    "    from gcd import gcd\n    assert gcd(9, 28) == 1\n")
    files["test_gcd_more.py"] = long_id_test
    work = project(tmp_path, files, "gcd")
    notes = call("view_file", path="NOTES.md"), call("edit_file", path="NOTES.md", old_text="notes", new_text="notes\n\ngcd: arguments were swapped")
    model = replay(tmp_path / "m.jsonl", *REAL_FIX, *notes, call("finish", summary="gcd recursed with swapped arguments."))
    issue = tmp_path / "issue.md"
    issue.write_text(f"# {GCD_TITLE}\n\n{GCD_BODY}\n\nSeen by @maintainer; closes #12 too.\n")
    proc, result = fix(work, model, "--issue-file", str(issue), "--test-command", PYTEST)
    assert proc.returncode == 0, proc.stderr
    message = git(work, "log", "-1", "--format=%B", result["branch"])
    assert message.startswith(f"Fix: {GCD_TITLE}\n\n")
    assert "gcd recursed with swapped arguments." in message
    # the issue, title and body, inert (no mention, no closing keyword in a commit message)
    assert GCD_BODY in message and "Seen by @\u200dmaintainer" in message
    assert not re.search(r"(?i)\bcloses\s+#12", message)
    # every changed file with its line counts
    assert re.search(r"^    NOTES\.md \(\+2 -0\)$", message, re.MULTILINE)
    assert re.search(r"^    gcd\.py \(\+1 -1\)$", message, re.MULTILINE)
    # every fixed test named, none cut inside its id, no "and 1 more"
    fixed = result["tests"]["fixed"]
    assert len(fixed) == 3 and "and 1 more" not in message
    for test in fixed:
        assert f"  - {test}\n" in message
    long_id = "test_gcd_more.py::test_gcd_of_two_numbers_that_share_no_common_factor_whatsoever_is_one_every_time"
    assert long_id in fixed
    for line in message.splitlines():
        assert len(line) <= 72 or len(line.split()) <= 2, line  # longer only where one id cannot be cut


# -- the rules, as pure functions -----------------------------------------------------------------------

def tr(outcomes: dict[str, str] | None, code: int, output: str = "", ran: int | None = -1):
    from clovercode.fixflow.results import TestResults, exit_code_only
    from clovercode.fixflow.testrun import TestRun

    if outcomes is None:
        results = exit_code_only("no report")
    else:
        results = TestResults("junit", outcomes, ran=len(outcomes) if ran == -1 else ran)
    return TestRun("pytest -q", code, False, 1.0, output, 0, results)


def test_the_outcome_rules():
    from clovercode.fixflow.verdict import conclude

    before = tr({"t.py::test_a": "failed", "t.py::test_b": "passed"}, 1)
    assert conclude(before, tr({"t.py::test_a": "passed", "t.py::test_b": "passed"}, 0), "x").outcome == "fixed"
    assert conclude(before, tr({"t.py::test_a": "failed", "t.py::test_b": "passed"}, 1), "x").outcome == "unverified"
    assert conclude(before, tr({"t.py::test_a": "passed", "t.py::test_b": "failed"}, 1), "x").outcome == "regressed"
    assert conclude(before, None, "x").reason.startswith("no test ran")
    # a new test the issue names, passing now: the issue's own proof
    green = tr({"t.py::test_b": "passed"}, 0)
    named = conclude(green, tr({"t.py::test_b": "passed", "t.py::test_gcd_zero": "passed"}, 0), "see `test_gcd_zero`")
    assert named.outcome == "fixed" and named.named == ("t.py::test_gcd_zero",)
    assert conclude(green, tr({"t.py::test_b": "passed"}, 0), "mentions test_b").outcome == "unverified"
    # exit codes only: failed before and passes now is a fix; passed before and after shows nothing
    assert conclude(tr(None, 1), tr(None, 0), "x").outcome == "fixed"
    assert conclude(tr(None, 0), tr(None, 0), "x").outcome == "unverified"
    assert conclude(None, tr(None, 0), "x").outcome == "unverified"  # no baseline
    # zero tests after the change, tests before: the change broke the run, nothing was fixed
    assert conclude(before, tr({}, 0, ran=0), "x").outcome == "regressed"


def test_unittest_totals_and_zero_tests():
    from clovercode.fixflow.results import read_results

    out = ("F.s..\n======\nFAIL: test_x (m.T.test_x)\n------\nTraceback\n\n"
           "----------------------------------------------------------------------\nRan 5 tests in 0.001s\n\n"
           "FAILED (failures=1, skipped=1)\n")
    results = read_results(None, out, 1, 0, Path("/nonexistent"))
    assert results.counts() == {"passed": 3, "failed": 1, "skipped": 1} and results.ran == 5
    empty = read_results(None, "\n----\nRan 0 tests in 0.000s\n\nOK\n", 0, 0, Path("/nonexistent"))
    assert empty.ran == 0 and empty.note == "unittest ran no tests"
    missing = read_results(None, "/usr/bin/python3: No module named pytest\n", 1, 0, Path("/nonexistent"))
    assert missing.missing == "pytest (/usr/bin/python3: No module named pytest)" and missing.ran == 0
