"""`clovercode fix` command line: mistakes fail fast and clearly, before any model time is spent."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import cli_env, default_sigint, git, make_git_repo, run_cli
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

from clovercode.ground.config import load_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPLAY = f"replay:{FIXTURES / 'durations.replay.jsonl'}"
TOKEN = "ghs_valid_token"


def fix(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run_cli("fix", "--sandbox", "none", "--model", REPLAY, *args, env=cli_env(**env))


@pytest.fixture
def work(tmp_path) -> Path:
    return make_git_repo(tmp_path / "durations", FIXTURES / "durations")


def test_pr_without_a_token_fails_before_the_model(work):
    proc = fix("format_duration is wrong", "--repo", str(work), "--pr", "--github-repo", "octo/durations")
    assert proc.returncode == 2
    assert "GITHUB_TOKEN or GH_TOKEN" in proc.stderr and "Traceback" not in proc.stderr
    assert "step 1" not in proc.stdout and git(work, "branch", "--list").split() == ["*", "main"]


def test_push_to_a_missing_remote_fails_before_the_model(work):
    proc = fix("format_duration is wrong", "--repo", str(work), "--push", "--remote", "upstream")
    assert proc.returncode == 2 and "git remote 'upstream' does not exist" in proc.stderr


def test_issue_given_twice_or_not_at_all(work):
    for args in (("text", "--issue-file", str(work / "README.md")), ()):
        proc = fix(*args, "--repo", str(work))
        assert proc.returncode == 2 and "exactly one way" in proc.stderr


def test_bad_github_issue_and_author(work):
    proc = fix("--github-issue", "octo/durations", "--repo", str(work))
    assert proc.returncode == 2 and "OWNER/REPO#NUMBER" in proc.stderr
    proc = fix("x", "--author", "nobody", "--repo", str(work))
    assert proc.returncode == 2 and "'Name <email>'" in proc.stderr


def test_project_file_cannot_redirect_the_token(work):
    (work / "clovercode.toml").write_text('[github]\napi_url = "http://127.0.0.1:1/steal"\n')
    git(work, "add", "clovercode.toml")
    git(work, "commit", "-q", "-m", "config")
    cfg = load_config(work, {}, {}, trust_project=True)  # even a trusted project: ignored, with a note
    assert cfg["github.api_url"] == "https://api.github.com" and "ignored github.api_url" in cfg.declared.notes[0]


def test_outside_git_the_working_tree_is_edited(tmp_path):
    plain = shutil.copytree(FIXTURES / "durations", tmp_path / "plain")
    proc = fix("format_duration(5400) gives 1h90m", "--repo", str(plain), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["commit"] is None and result["tests"]["passed"] is True
    assert any("not a git repository" in note for note in result["notes"])
    assert "seconds % 3600 // 60" in (plain / "durations.py").read_text()
    assert fix("x", "--repo", str(plain), "--push").returncode == 2


def test_no_commit_edits_in_place(work):
    proc = fix("format_duration(5400) gives 1h90m", "--repo", str(work), "--no-commit", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["branch"] is None
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(work, "status", "--porcelain", "--untracked-files=no").strip() == "M durations.py"


def test_rerun_on_the_fix_branch_itself_is_refused(work):
    assert fix("format_duration(5400) gives 1h90m", "--repo", str(work)).returncode == 0
    proc = fix("format_duration(5400) gives 1h90m", "--repo", str(work))
    assert proc.returncode == 7 and "git switch main" in proc.stderr


def test_fork_and_detached_head(tmp_path, fake_github):  # noqa: F811
    """Pushing to a fork opens the pull request upstream with head 'forker:branch'; from a detached
    HEAD the pull request targets the repository's default branch, asked from GitHub."""
    origin = tmp_path / "forker" / "durations.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    git(work, "remote", "add", "origin", "https://github.com/forker/durations.git")
    # no network here: the user's own git config rewrites the GitHub URL to the local bare repository
    # (a repository's rewrite would not be followed: trust/gitsafe.py)
    subprocess.run(["git", "config", "--global", f"url.{origin.parent.as_uri()}/.insteadOf", "https://github.com/forker/"],
                   check=True)
    git(work, "push", "-q", "origin", "main")
    git(work, "switch", "-q", "--detach", "HEAD")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/durations", default_branch="main")
    fake_github.add_issue("octo/durations", 7, "format_duration(5400) gives 1h90m", "")
    proc = fix("--github-issue", "octo/durations#7", "--pr", "--repo", str(work), "--json",
               GITHUB_TOKEN=TOKEN, CLOVERCODE_GITHUB_API_URL=fake_github.url)
    assert proc.returncode == 0, proc.stderr
    [create] = fake_github.calls("pulls/create")
    assert create.body["head"] == "forker:clovercode/7-format-duration-5400-gives-1h90m"
    assert create.body["base"] == "main" and len(fake_github.calls("repos/get")) == 1
    assert fake_github.calls("pulls/list")[0].query["head"] == ["forker:clovercode/7-format-duration-5400-gives-1h90m"]
    assert fake_github.violations == []


def test_fix_help_lists_the_exit_codes():
    proc = run_cli("fix", "--help", env=cli_env(COLUMNS="200"))
    assert proc.returncode == 0
    for option in ("--issue-file", "--github-issue", "--push", "--pr", "--remote", "--base", "--author", "--test-command"):
        assert option in proc.stdout
    assert "130 interrupted" in proc.stdout


def test_ctrl_c_during_the_tests_is_an_interrupted_run(work):
    import os
    import signal
    import sys
    import time

    # no baseline run: this is about the tests after the model's change (a baseline would take the minute)
    (work / "clovercode.toml").write_text('[fix]\ntest_command = "sleep 60"\nbaseline = false\n')
    git(work, "add", "clovercode.toml")
    git(work, "commit", "-q", "-m", "slow tests")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", "format_duration(5400) gives 1h90m",
                             "--repo", str(work), "--model", REPLAY, "--sandbox", "none", "--json"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    states = Path(os.environ["XDG_STATE_HOME"]) / "clovercode" / "trajectories"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and '"run_end"' not in "".join(p.read_text() for p in states.glob("*.jsonl")):
        time.sleep(0.1)
    time.sleep(1.0)  # the test command is running now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    result = json.loads(out)
    assert result["status"] == "interrupted" and result["commit"] is None
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert "seconds % 3600 // 60" in (work / "durations.py").read_text()  # the model's work is kept


def test_project_in_a_subdirectory_of_the_repository(tmp_path):
    top = tmp_path / "mono"
    shutil.copytree(FIXTURES / "durations", top / "tools" / "durations")
    make_git_repo(top)
    proc = fix("format_duration(5400) gives 1h90m", "--repo", str(top / "tools" / "durations"), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed_files"] == ["durations.py"]
    assert [f["path"] for f in result["diffstat"]] == ["tools/durations/durations.py"]
    assert git(top, "show", "--name-only", "--format=", "HEAD").split() == ["tools/durations/durations.py"]
