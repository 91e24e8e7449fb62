"""The pieces of `clovercode fix`: branch names, test detection, issue input, messages, the test loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import git, make_git_repo

from clovercode.agent.budget import StopReason
from clovercode.ground.config import load_config
from clovercode.ground.errors import UsageError, VcsError
from clovercode.executors.base import CommandResult
from clovercode.executors.local import LocalExecutor
from clovercode.fixflow.issue import Issue, choose_source, issue_from_file, issue_from_text
from clovercode.fixflow.report import commit_message, pull_body, subject
from clovercode.fixflow.rounds import run_rounds
from clovercode.fixflow.testrun import TestCommand, TestRun, detect_test_command, feedback_message
from clovercode.github.refs import IssueRef, RepoRef
from clovercode.wiring.session import Session
from clovercode.backends.replay import ReplayBackend
from clovercode.vcs.branches import branch_name, existing_issue_branch, slugify, valid_branch_name
from clovercode.vcs.git import FileStat, open_checkout, parse_author

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_branch_names():
    assert slugify("Mean() is WRONG for [1, 2]!") == "mean-is-wrong-for-1-2"
    assert slugify("Ünïcödé naïve café") == "unicode-naive-cafe"
    assert slugify("a" * 60) == "a" * 40 and slugify("!!!") == ""
    assert len(slugify("word " * 30)) <= 40
    assert branch_name("clovercode/", "format_duration(5400) gives 1h90m", 7) == "clovercode/7-format-duration-5400-gives-1h90m"
    assert branch_name("clovercode/", "???", 7) == "clovercode/7"
    assert branch_name("bot/", "???") == "bot/fix"
    names = ["main", "clovercode/70-other", "clovercode/7-old-title", "clovercode/7"]
    assert existing_issue_branch("clovercode/", 7, names) == "clovercode/7"
    assert existing_issue_branch("clovercode/", 7, ["clovercode/70-x"]) is None
    for good in ("clovercode/7-x", "fix/a.b_c"):
        assert valid_branch_name(good)
    for bad in ("", "a..b", "a b", "a~b", "x/", "-x", "a.lock", "a@{b", "/a", "a//b", "a/.b"):
        assert not valid_branch_name(bad), bad


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files, command", [
    ({"Makefile": "build:\n\tcc x.c\n\ntest: build\n\t./run-tests\n", "package.json": '{"scripts": {"test": "jest"}}'}, "make test"),
    ({"Makefile": "TEST:=1\nall:\n\ttrue\n", "package.json": '{"scripts": {"test": "jest"}}'}, "npm test"),
    ({"package.json": '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}', "go.mod": "module x\n"}, "go test ./..."),
    ({"Cargo.toml": "[package]\nname='x'\n", "go.mod": "module x\n"}, "cargo test"),
    ({"src/pkg/tests/test_core.py": "def test(): pass\n"}, "python3 -m pytest -q"),
    ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, "python3 -m pytest -q"),
    ({"tests/test_x.py": "", ".venv/bin/python": ""}, ".venv/bin/python -m pytest -q"),
    ({"README.md": "no tests here", "node_modules/x/test_y.py": ""}, None),
])
def test_detects_the_test_command(tmp_path, files, command):
    found = detect_test_command(tree(tmp_path, files), python_has_pytest=lambda: True)
    assert (found.command if found else None) == command


def test_python_without_pytest_falls_back_to_unittest(tmp_path):
    found = detect_test_command(tree(tmp_path, {"test_calc.py": ""}), python_has_pytest=lambda: False)
    assert found.command == "python3 -m unittest -q" and "pytest is not installed" in found.source


def test_configured_test_command_wins_and_none_disables(tmp_path):
    from clovercode.fixflow.plan import resolve_tests

    tree(tmp_path, {"go.mod": "module x\n", "clovercode.toml": '[fix]\ntest_command = "./check.sh"\n'})
    found = resolve_tests(tmp_path, load_config(tmp_path, {}))
    assert found.command == "./check.sh" and "clovercode.toml" in found.source
    assert resolve_tests(tmp_path, load_config(tmp_path, {"CLOVERCODE_FIX_TEST_COMMAND": "none"})) is None


def test_issue_input(tmp_path):
    issue = issue_from_text("# mean() is wrong\n\nmean([1, 2]) returns 1.\n")
    assert (issue.title, issue.body) == ("mean() is wrong", "mean([1, 2]) returns 1.")
    assert issue.task("pytest -q").startswith("mean() is wrong\n\nmean([1, 2]) returns 1.\n\nThe project's tests run with `pytest -q`")
    github = Issue("Crash on empty input", "Traceback…", IssueRef(RepoRef("o", "r"), 12))
    assert github.task(None) == "Fix GitHub issue #12: Crash on empty input\n\nTraceback…"
    with pytest.raises(UsageError, match="empty"):
        issue_from_text(" \n ")
    with pytest.raises(UsageError, match="not found"):
        issue_from_file(tmp_path / "nope.md")
    (tmp_path / "bin.md").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not UTF-8"):
        issue_from_file(tmp_path / "bin.md")
    with pytest.raises(UsageError, match="exactly one way"):
        choose_source("text", tmp_path / "x", None)
    with pytest.raises(UsageError, match="exactly one way"):
        choose_source(None, None, None)


def run(round_: int, passed: bool, output: str = "ok") -> TestRun:
    return TestRun("pytest -q", 0 if passed else 1, False, 1.25, output, round_)


def test_commit_message_and_pull_body():
    issue = Issue("mean() is wrong " + "x" * 80, "", IssueRef(RepoRef("o", "r"), 3))
    assert subject(issue) == ("Fix #3: mean() is wrong " + "x" * 80)[:71] + "…" and len(subject(issue)) == 72
    summary = "mean() used floor division. " * 5 + "\n\n- changed calc.py\n- added a test"
    message = commit_message(issue, summary, TestCommand("pytest -q", "detected"), [run(0, False), run(1, True)], "#3")
    lines = message.splitlines()
    # wrapped at 72, but a word (here the title's 80 x's; a test id, a path) is never cut
    assert lines[1] == "" and all(len(line) <= 72 or len(line.split()) == 1 for line in lines[2:])
    assert "- changed calc.py\n- added a test" in message
    assert "Tests: `pytest -q` passed (exit code 0, 1.2 s) after 1 round of test feedback." in message.replace("test\nfeedback", "test feedback")
    assert message.endswith("\n\nFixes #3\n")
    assert "Tests: none run" in commit_message(issue, None, None, [], None)
    body = pull_body(issue, "s", TestCommand("pytest -q", "d"), [run(0, False, "E   assert 1 == 2\n```")],
                     [FileStat("calc.py", 1, 1), FileStat("logo.png", None, None)], "o/r#3", "replay:x", 4)
    assert body.startswith("Fixes o/r#3\n") and "| `calc.py` | +1 −1 |" in body and "| `logo.png` | binary |" in body
    assert "this pull request is a draft" in body and "````\nE   assert 1 == 2\n```\n````" in body
    huge = pull_body(issue, "word " * 30000, None, [], [], None, "m", 1)
    assert len(huge) < 65536 and "the summary is cut here" in huge


def test_only_a_fixed_change_closes_its_issue():
    from clovercode.fixflow.verdict import FIXED, REGRESSED, UNVERIFIED, Conclusion

    issue = Issue("mean() is wrong", "", IssueRef(RepoRef("o", "r"), 3))
    for outcome, word in ((FIXED, "Fixes"), (UNVERIFIED, "Refs"), (REGRESSED, "Refs")):
        concluded = Conclusion(outcome, "why")
        message = commit_message(issue, "s", None, [], "#3", conclusion=concluded, left_out=["big.bin (over 10 MiB)"])
        body = pull_body(issue, "s", None, [], [], "o/r#3", "m", 1, conclusion=concluded, left_out=["big.bin (over 10 MiB)"])
        # a draft marked ready and merged must not close an issue no test showed fixed
        assert message.endswith(f"\n\n{word} #3\n") and body.startswith(f"{word} o/r#3\n"), outcome
        assert "Not committed (left out on purpose):\n    big.bin (over 10 MiB)" in message
        assert "- big.bin (over 10 MiB)" in body


def test_feedback_message_keeps_the_end_of_the_log():
    text = feedback_message(run(0, False, "x" * 10000 + "\nFAILED test_a - AssertionError"), 1, 3)
    assert "round 1 of 3" in text and "`pytest -q` (exit code 1)" in text
    assert text.count("x") < 6100 and "FAILED test_a - AssertionError" in text


class RecordingExecutor:
    """Wraps the real executor and remembers what ran through it (the test loop must use the session's)."""

    name = "recording"

    def __init__(self):
        self.inner = LocalExecutor()
        self.commands = []

    def run(self, command, cwd, timeout, env=None) -> CommandResult:
        self.commands.append(command)
        return self.inner.run(command, cwd, timeout, env)


def test_test_loop_runs_through_the_session_executor(tmp_path):
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    cfg = load_config(work, {}, {"sandbox": "none", "trajectory_dir": str(tmp_path / "traj")})
    executor = RecordingExecutor()
    session = Session(work, cfg, ReplayBackend(FIXTURES / "durations-feedback.replay.jsonl"), executor, False, {})
    from rich.console import Console

    rounds = run_rounds(session, "fix format_duration", TestCommand("python3 -m unittest -q", "test"), 3, 60,
                        None, Console(file=open("/dev/null", "w")), lambda result: bool(result.changed))
    # the baseline before the model acts, then one run per finish
    assert executor.commands == ["python3 -m unittest -q"] * 3
    assert rounds.baseline.passed is False and rounds.baseline.results.source == "unittest"
    assert [t.passed for t in rounds.tests] == [False, True] and rounds.steps == 6
    assert rounds.result.stop is StopReason.FINISHED and rounds.result.changed == ["durations.py"]
    roles = [(m.role, sorted(m.tags)) for m in session.conversation.messages if m.role == "user"]
    assert roles == [("user", ["goal"]), ("user", ["feedback"])]
    assert session.conversation.messages[0].content == "fix format_duration"
    events = [json.loads(line)["kind"] for line in session.last_trajectory.read_text().splitlines()]
    assert events.count("run_start") == 2 and events.count("test_run") == 3


def test_author_parsing():
    assert parse_author("Ada Lovelace <ada@example.org>") == ("Ada Lovelace", "ada@example.org")
    for bad in ("ada@example.org", "<ada@example.org>", "Ada <not an email>"):
        with pytest.raises(UsageError, match="Name <email>"):
            parse_author(bad)


def test_checkout_refuses_dirty_trees_and_never_commits_untracked_files(tmp_path):
    work = make_git_repo(tmp_path / "p", FIXTURES / "durations")
    (work / "mine.txt").write_text("untracked, mine\n")
    checkout = open_checkout(work)
    start = checkout.start()
    assert "mine.txt" in start.untracked and start.branch == "main"
    (work / "durations.py").write_text("changed\n")
    (work / "new.py").write_text("new\n")
    (work / ".gitignore").write_text("build/\n")
    (work / "build").mkdir()
    (work / "build" / "out.py").write_text("")
    pending = checkout.changes(start, ["durations.py", "new.py", "build/out.py"])
    # .gitignore is new too: every change counts, whoever made it; mine.txt is the user's, unchanged
    assert pending.paths == (".gitignore", "durations.py", "new.py")
    assert [item.describe() for item in pending.left_out] == ["build/out.py (ignored by git)"]
    (work / "mine.txt").write_text("untracked, mine, and changed by a command\n")
    assert "mine.txt (untracked before the run)" in [i.describe() for i in checkout.changes(start).left_out]
    with pytest.raises(VcsError, match="uncommitted changes to tracked files: durations.py"):
        checkout.start()
    (tmp_path / "nowhere").mkdir()
    assert open_checkout(tmp_path / "nowhere") is None


def test_empty_repository_is_a_clear_error(tmp_path):
    (tmp_path / "e").mkdir()
    git(tmp_path / "e", "init", "-q")
    with pytest.raises(VcsError, match="no commit yet"):
        open_checkout(tmp_path / "e").start()


def test_push_with_a_stale_lease_is_refused_readably(tmp_path):
    import subprocess

    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    work = make_git_repo(tmp_path / "p", FIXTURES / "durations")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main:fix")
    checkout = open_checkout(work)
    assert checkout.remote_heads("origin", "fix") == {"fix": git(work, "rev-parse", "HEAD").strip()}
    git(work, "switch", "-q", "-c", "fix")
    git(work, "commit", "-q", "--allow-empty", "-m", "another")
    with pytest.raises(VcsError) as err:  # clovercode believed the branch did not exist yet
        checkout.push("origin", "fix", None)
    assert err.value.message.startswith("git push failed: error: failed to push some refs")
    assert err.value.message.endswith("([rejected] (stale info))")
    assert "\n  stderr:" not in err.value.message


def test_push_credentials_only_for_the_github_host():
    import base64

    from clovercode.github.refs import push_auth_env, without_secrets

    env = push_auth_env("https://github.com/octo/calc.git", "https://api.github.com", "tok")
    assert env["GIT_CONFIG_COUNT"] == "1" and env["GIT_CONFIG_KEY_0"] == "http.https://github.com/.extraheader"
    assert env["GIT_CONFIG_VALUE_0"] == "AUTHORIZATION: basic " + base64.b64encode(b"x-access-token:tok").decode()
    assert push_auth_env("https://ghe.example.com/o/r.git", "https://ghe.example.com/api/v3", "t")["GIT_CONFIG_KEY_0"] \
        == "http.https://ghe.example.com/.extraheader"
    for url in ("https://evil.example/o/r.git", "git@github.com:o/r.git", "http://github.com/o/r", "file:///srv/r.git"):
        assert push_auth_env(url, "https://api.github.com", "tok") == {}
    assert without_secrets({"PATH": "/bin", "GITHUB_TOKEN": "x", "GH_TOKEN": "y", "CLOVERCODE_API_KEY": "z"}) == {"PATH": "/bin"}


def test_commit_and_push_run_no_hooks(tmp_path):
    # A pre-push hook (the pre-commit framework's, say) would run the project's configuration, which
    # the model may have written, outside the sandbox.
    import subprocess

    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    work = make_git_repo(tmp_path / "p", FIXTURES / "durations")
    git(work, "remote", "add", "origin", origin.as_uri())
    marker = tmp_path / "hooks-ran"
    for hook in ("pre-commit", "post-checkout", "post-commit", "pre-push", "reference-transaction"):
        path = work / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        path.chmod(0o755)
    checkout = open_checkout(work)
    start = checkout.start()
    (work / "durations.py").write_text("fixed\n")
    pending = checkout.changes(start)
    checkout.commit_on_branch(start, "fix", pending, "Fix it", ("A", "a@example.org"), ("A", "a@example.org"))
    checkout.push("origin", "fix", None)
    assert git(origin, "rev-parse", "fix").strip() == git(work, "rev-parse", "HEAD").strip()
    assert not marker.exists(), marker.read_text()
