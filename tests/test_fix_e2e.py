"""`clovercode fix` end to end: real git with a bare `origin`, a program with a real bug and its own
tests, a recorded model session, and GitHub played by a local server that checks every request
against GitHub's published API description."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo, run_cli
from fake_github import fake_github, github_api  # noqa: F401 - fixtures

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOKEN = "ghs_valid_token"
ISSUE_TITLE = "format_duration(5400) gives 1h90m"
BRANCH = "clovercode/7-format-duration-5400-gives-1h90m"


@pytest.fixture
def project(tmp_path) -> tuple[Path, Path]:
    """The durations program as a git checkout whose `origin` is a bare repository (file://)."""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    work = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    return work, origin


@pytest.fixture
def github(fake_github, project):  # noqa: F811
    fake_github.bare_repo = project[1]
    fake_github.add_repo("octo/durations")
    fake_github.add_issue("octo/durations", 7, ISSUE_TITLE,
                          "`format_duration(5400)` returns `'1h90m'`; it should be `'1h30m'`.")
    return fake_github


def fix(work: Path, fake, replay: str, *args: str, token: str = TOKEN) -> tuple[subprocess.CompletedProcess, dict]:
    env = cli_env(GITHUB_TOKEN=token, CLOVERCODE_GITHUB_API_URL=fake.url)
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{FIXTURES / replay}",
                   "--json", *args, env=env)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


def bare(origin: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(origin), *args], check=True, capture_output=True, text=True).stdout


def test_issue_to_pull_request(project, github):
    work, origin = project
    base = git(work, "rev-parse", "HEAD").strip()
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "fixed" and result["exit_code"] == 0
    # the branch: named from the issue, exactly one commit on the base, checked out for the person
    assert result["branch"] == BRANCH and result["base"] == base
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == BRANCH
    assert git(work, "rev-list", "--count", f"{base}..{BRANCH}").strip() == "1"
    assert git(work, "rev-parse", f"{BRANCH}^").strip() == base
    assert git(work, "diff", "--name-only", base, BRANCH).split() == ["durations.py"]
    assert "seconds % 3600 // 60" in (work / "durations.py").read_text()
    assert git(work, "status", "--porcelain", "--untracked-files=no") == ""
    message = git(work, "log", "-1", "--format=%B", BRANCH)
    assert message.startswith(f"Fix #7: {ISSUE_TITLE}\n\n")
    assert "counts the minutes left after the full hours" in message and "Fixes #7" in message
    assert "passed" in message
    # the tests: run after finish, in the project, and passing
    assert result["tests"]["passed"] is True
    assert [r["passed"] for r in result["tests"]["runs"]] == [True]
    assert result["tests"]["runs"][0]["command"] in ("python3 -m pytest -q", "python3 -m unittest -q")
    # the push: origin has the branch at the fix commit
    assert bare(origin, "rev-parse", f"refs/heads/{BRANCH}").strip() == result["commit"]
    assert result["pushed_to"] == "origin"
    # the pull request: one create call with a body GitHub's schema accepts
    assert github.violations == []
    [create] = github.calls("pulls/create")
    assert create.headers["authorization"] == f"Bearer {TOKEN}"
    assert create.body["head"] == BRANCH and create.body["base"] == "main" and create.body["draft"] is False
    assert create.body["title"] == f"Fix #7: {ISSUE_TITLE}"
    assert create.body["body"].startswith("Fixes #7\n") and "`durations.py`" in create.body["body"]
    assert result["pull_request"] == {"number": 1, "url": "https://github.com/octo/durations/pull/1",
                                      "draft": False, "action": "created"}
    [issue] = github.calls("issues/get")
    assert issue.path == "/repos/octo/durations/issues/7"
    # the trajectory records the model's run, the test run and the outcome
    kinds = [json.loads(line)["kind"] for line in Path(result["trajectory"]).read_text().splitlines()]
    assert kinds[0] == "run_start" and "test_run" in kinds and kinds[-1] == "fix_result"


def test_rerun_updates_the_branch_and_the_pull_request(project, github):
    work, origin = project
    proc, first = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    git(work, "switch", "-q", "main")
    # main moves on meanwhile; the re-run starts from the new HEAD and replaces the branch
    (work / "NOTES.md").write_text("notes\n")
    git(work, "add", "NOTES.md")
    git(work, "commit", "-q", "-m", "notes")
    git(work, "push", "-q", "origin", "main")
    new_base = git(work, "rev-parse", "HEAD").strip()
    github.repos["octo/durations"]["issues"][7]["title"] = "format_duration is wrong for hours"  # renamed meanwhile
    proc, second = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    assert second["branch"] == BRANCH  # found by issue number, not rebuilt from the new title
    assert bare(origin, "rev-parse", f"refs/heads/{BRANCH}").strip() == second["commit"] != first["commit"]
    assert git(work, "rev-parse", f"{BRANCH}^").strip() == new_base
    assert len(github.pulls) == 1 and len(github.calls("pulls/create")) == 1
    [update] = github.calls("pulls/update")
    assert update.body["title"] == "Fix #7: format_duration is wrong for hours"
    assert second["pull_request"]["action"] == "updated" and second["pull_request"]["number"] == 1
    assert github.violations == []


def test_failing_tests_go_back_to_the_model(project, github):
    work, _ = project
    proc, result = fix(work, github, "durations-feedback.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    runs = result["tests"]["runs"]
    assert [(r["round"], r["passed"]) for r in runs] == [(0, False), (1, True)]
    assert "1h30m" in runs[0]["output_tail"]  # the failure the model was shown
    assert result["steps"] == 6
    events = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    assert [e["kind"] for e in events].count("run_start") == 2
    assert git(work, "rev-list", "--count", f"main..{BRANCH}").strip() == "1"
    assert github.pulls[0].draft is False


def test_tests_still_failing_open_a_draft(project, github):
    work, origin = project
    proc, result = fix(work, github, "durations-feedback.replay.jsonl", "--github-issue", "octo/durations#7",
                       "--pr", "--test-rounds", "0")
    assert proc.returncode == 1, proc.stderr
    assert result["status"] == "tests_failed" and result["tests"]["passed"] is False
    assert bare(origin, "rev-parse", f"refs/heads/{BRANCH}").strip() == result["commit"]
    [create] = github.calls("pulls/create")
    assert create.body["draft"] is True and "The tests fail" in create.body["body"]
    assert result["pull_request"]["draft"] is True
    # a later run whose tests pass turns the draft into a ready pull request
    git(work, "switch", "-q", "main")
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    assert github.pulls[0].draft is False and result["pull_request"]["draft"] is False
    assert github.violations == []


def test_no_change_leaves_everything_as_it_was(project, github):
    work, origin = project
    proc, result = fix(work, github, "durations-nochange.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 4, proc.stderr
    assert result["status"] == "no_change" and result["commit"] is None
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert BRANCH not in git(work, "branch", "--list")
    assert bare(origin, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert github.pulls == []


def test_dirty_tree_is_refused_and_untouched(project, github):
    work, _ = project
    (work / "durations.py").write_text((work / "durations.py").read_text() + "# my work in progress\n")
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 7
    assert "uncommitted changes" in result["error"] and "durations.py" in result["error"]
    assert (work / "durations.py").read_text().endswith("# my work in progress\n")
    assert github.calls("pulls/create") == []


def test_untracked_files_are_never_committed(project, github):
    work, _ = project
    (work / "scratch.txt").write_text("mine\n")
    proc, result = fix(work, github, "durations.replay.jsonl", "--issue-file", str(FIXTURES / "durations" / "README.md"),
                       "--author", "Ada Lovelace <ada@example.org>")
    assert proc.returncode == 0, proc.stderr
    assert result["branch"] == "clovercode/durations"
    assert git(work, "log", "-1", "--format=%an <%ae>|%cn").strip() == "Ada Lovelace <ada@example.org>|Test"
    assert git(work, "show", "--name-only", "--format=", "HEAD").split() == ["durations.py"]
    assert (work / "scratch.txt").read_text() == "mine\n"
    assert result["pushed_to"] is None and github.requests == []


def test_bad_token_fails_before_the_model_runs(project, github):
    work, _ = project
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr",
                       token="ghs_revoked")
    assert proc.returncode == 7
    assert "401 Bad credentials" in result["error"] and "GITHUB_TOKEN" in result["error"]
    assert git(work, "branch", "--list").split() == ["*", "main"]


def test_rate_limit_on_the_pull_request_keeps_the_commit(project, github):
    work, origin = project
    github.fail_next("POST", "/pulls", "rate_limit")
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 7, proc.stderr
    assert result["status"] == "vcs_error" and "rate limit" in result["error"] and "resets at" in result["error"]
    assert result["commit"] and bare(origin, "rev-parse", f"refs/heads/{BRANCH}").strip() == result["commit"]
    assert result["tests"]["passed"] is True
    assert "Nothing is lost" in proc.stderr
    # once the limit has reset, running again opens the pull request for the same branch
    github.remaining = 100
    git(work, "switch", "-q", "main")
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    assert len(github.pulls) == 1 and github.violations == []


def test_pull_request_opened_meanwhile_is_updated(project, github):
    """GitHub answers 422 "already exists" when its list lagged behind: clovercode updates that one."""
    work, _ = project
    proc, _ = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    git(work, "switch", "-q", "main")
    github.list_lags = 1
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 0, proc.stderr
    assert [r.status for r in github.calls("pulls/create")] == [201, 422]
    assert result["pull_request"]["action"] == "updated" and len(github.pulls) == 1
    # when GitHub keeps saying it exists but never lists it, the error says so
    git(work, "switch", "-q", "main")
    github.list_lags = 99
    proc, result = fix(work, github, "durations.replay.jsonl", "--github-issue", "octo/durations#7", "--pr")
    assert proc.returncode == 7 and "already exists" in result["error"]
    assert len(github.pulls) == 1 and github.violations == []


def test_tokens_never_reach_the_models_commands_or_the_tests(project, github, tmp_path):
    work, _ = project
    (work / "clovercode.toml").write_text('[fix]\ntest_command = "env > test-env.txt && python3 -m unittest -q"\n')
    git(work, "add", "clovercode.toml")
    git(work, "commit", "-q", "-m", "tests")
    turns = [json.loads(line) for line in (FIXTURES / "durations.replay.jsonl").read_text().splitlines()]
    spy = {"text": "<tool_call>\n<function=run_command>\n<parameter=command>\nenv > model-env.txt\n</parameter>\n"
                   "</function>\n</tool_call>"}
    replay = tmp_path / "spy.replay.jsonl"
    replay.write_text("".join(json.dumps(t) + "\n" for t in [spy, *turns]))
    env = cli_env(GITHUB_TOKEN=TOKEN, GH_TOKEN=TOKEN, CLOVERCODE_API_KEY="sk-secret", CLOVERCODE_GITHUB_API_URL=github.url)
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{replay}", "--json",
                   "--github-issue", "octo/durations#7", "--pr", env=env)
    assert proc.returncode == 0, proc.stderr
    for name in ("model-env.txt", "test-env.txt"):
        seen = (work / name).read_text()
        assert "PATH=" in seen and TOKEN not in seen and "sk-secret" not in seen, name
    # what the model's command wrote is part of its change; what the tests wrote is not
    assert git(work, "show", "--name-only", "--format=", "HEAD").split() == ["durations.py", "model-env.txt"]
    assert json.loads(proc.stdout)["not_committed"] == ["test-env.txt (written by the baseline test run)"]
    assert github.calls("pulls/create")[0].headers["authorization"] == f"Bearer {TOKEN}"
