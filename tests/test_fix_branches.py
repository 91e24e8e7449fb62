"""`clovercode fix` never drops a commit it did not make: a fix branch holding someone else's commit
is refused (exit 7) unless --force, every moved branch keeps a backup ref, and its own earlier
commit is replaced as before. Real git repositories, a real bare `origin`, the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo, run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPLAY = f"replay:{FIXTURES / 'durations.replay.jsonl'}"
ISSUE = "format_duration(5400) gives 1h90m"
BRANCH = "clovercode/format-duration-5400-gives-1h90m"


def fix(work: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "none", "--model", REPLAY, "--json", *args,
                   env=cli_env())
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


def backups(work: Path, prefix: str = "refs/clovercode/backup/") -> dict[str, str]:
    out = git(work, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split() for line in out.splitlines())


def add_commit(work: Path, branch: str, name: str, subject: str) -> str:
    git(work, "switch", "-q", branch)
    (work / name).write_text(f"{subject}\n")
    git(work, "add", name)
    git(work, "commit", "-q", "-m", subject)
    sha = git(work, "rev-parse", "HEAD").strip()
    git(work, "switch", "-q", "main")
    return sha


@pytest.fixture
def work(tmp_path) -> Path:
    return make_git_repo(tmp_path / "durations", FIXTURES / "durations")


def test_rerun_replaces_its_own_commit_and_keeps_a_backup(work):
    proc, first = fix(work)
    assert proc.returncode == 0, proc.stderr
    assert "Clovercode-Tree: " + git(work, "rev-parse", f"{BRANCH}^{{tree}}").strip() in \
        git(work, "log", "-1", "--format=%B", BRANCH)
    git(work, "switch", "-q", "main")
    proc, second = fix(work)
    assert proc.returncode == 0, proc.stderr
    assert second["commit"] != first["commit"] and second["discarded_commits"] == []
    [(ref, sha)] = backups(work).items()
    assert ref.startswith(f"refs/clovercode/backup/{BRANCH}/") and sha == first["commit"]
    assert second["branch_backups"] == [ref]


def test_a_commit_someone_added_to_the_fix_branch_is_never_dropped(work):
    proc, first = fix(work)
    assert proc.returncode == 0, proc.stderr
    git(work, "switch", "-q", "main")
    mine = add_commit(work, BRANCH, "NOTES.md", "my own notes on the fix")
    proc, result = fix(work)
    assert proc.returncode == 7, proc.stderr
    assert result["status"] == "error" and "holds 1 commit clovercode did not make" in result["error"]
    assert "my own notes on the fix" in proc.stderr and "--branch" in proc.stderr and "--force" in proc.stderr
    assert git(work, "rev-parse", BRANCH).strip() == mine  # untouched, and nothing ran
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main" and backups(work) == {}
    # a commit the user amended (same message, trailer and all) is theirs too
    git(work, "switch", "-q", BRANCH)
    git(work, "reset", "-q", "--hard", first["commit"])
    (work / "durations.py").write_text((work / "durations.py").read_text() + "# reviewed\n")
    git(work, "commit", "-q", "-a", "--amend", "--no-edit")
    amended = git(work, "rev-parse", "HEAD").strip()
    git(work, "switch", "-q", "main")
    proc, result = fix(work)
    assert proc.returncode == 7 and "holds 1 commit" in result["error"]
    # --force moves it, says what it dropped, and keeps it under a backup ref
    proc, result = fix(work, "--force")
    assert proc.returncode == 0, proc.stderr
    assert [c["sha"] for c in result["discarded_commits"]] == [amended]
    assert any(note.startswith("--force: a committed fix drops 1 commit") for note in result["notes"])
    assert list(backups(work).values()) == [amended]
    human = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "none", "--model", REPLAY, "--force",
                    env=cli_env())
    assert human.returncode == 7  # on the fix branch itself now: switch first
    git(work, "switch", "-q", "main")
    add_commit(work, BRANCH, "MORE.md", "more work")
    human = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "none", "--model", REPLAY, "--force",
                    env=cli_env())
    assert human.returncode == 0, human.stderr
    assert "Discarded: 1 commit(s) clovercode did not make" in human.stdout and "more work" in human.stdout
    assert "Backup: refs/clovercode/backup/" in human.stdout


def test_a_commit_pushed_to_the_remote_fix_branch_is_never_overwritten(tmp_path, work):
    """A reviewer pushed to the bot's branch; the next run starts from a fresh shallow clone (CI)."""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    proc, first = fix(work, "--push")
    assert proc.returncode == 0, proc.stderr
    git(work, "switch", "-q", "main")
    reviewer = add_commit(work, BRANCH, "REVIEW.md", "reviewer: handle negative durations")
    git(work, "push", "-q", "origin", BRANCH)
    clone = tmp_path / "ci"
    subprocess.run(["git", "clone", "-q", "--depth", "1", origin.as_uri(), str(clone)], check=True)
    git(clone, "config", "user.name", "CI")
    git(clone, "config", "user.email", "ci@example.invalid")
    proc, result = fix(clone, "--push")
    assert proc.returncode == 7, proc.stderr
    assert "reviewer: handle negative durations" in result["error"] and "on origin" in result["error"]
    assert git(origin, "rev-parse", BRANCH).strip() == reviewer
    assert git(clone, "for-each-ref", "refs/clovercode/") == ""  # the fetched copy is not left behind
    # without the reviewer's commit the same CI re-run replaces the bot's own commit
    subprocess.run(["git", "--git-dir", str(origin), "update-ref", f"refs/heads/{BRANCH}", first["commit"]], check=True)
    proc, result = fix(clone, "--push")
    assert proc.returncode == 0, proc.stderr
    assert git(origin, "rev-parse", BRANCH).strip() == result["commit"] != first["commit"]
    assert list(backups(clone).values()) == [first["commit"]]


def test_a_branch_is_named_only_when_one_is_made(work):
    """A run that ends without a change, or with --no-commit, makes no branch and names none."""
    nochange = f"replay:{FIXTURES / 'durations-nochange.replay.jsonl'}"
    for model, extra in ((nochange, ()), (REPLAY, ("--no-commit",))):
        proc = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "none", "--model", model, *extra, env=cli_env())
        assert proc.returncode in (0, 4), proc.stderr
        assert BRANCH not in proc.stdout + proc.stderr and "Fix branch" not in proc.stdout + proc.stderr
        assert git(work, "branch", "--list").split() == ["*", "main"]
        git(work, "checkout", "-q", ".")
    proc = run_cli("fix", ISSUE, "--repo", str(work), "--sandbox", "none", "--model", REPLAY, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert f"on branch {BRANCH} (one commit on" in proc.stdout and ", a new branch)" in proc.stdout


def test_a_branch_that_cannot_be_checked_out_is_left_as_it_was(tmp_path, work):
    from clovercode.ground.errors import VcsError
    from clovercode.vcs.git import open_checkout

    git(work, "branch", "fix")
    tip = add_commit(work, "fix", "x.md", "work on fix")
    git(work, "worktree", "add", "-q", str(tmp_path / "elsewhere"), "fix")  # `fix` is checked out there
    checkout = open_checkout(work)
    start = checkout.start()
    (work / "durations.py").write_text("fixed\n")
    pending = checkout.changes(start)
    with pytest.raises(VcsError, match="git checkout failed"):
        checkout.commit_on_branch(start, "fix", pending, "Fix it", ("A", "a@example.org"), ("A", "a@example.org"), tip)
    assert git(work, "rev-parse", "fix").strip() == tip
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    with pytest.raises(VcsError, match="changed during the run"):  # the plan saw no branch: refused, untouched
        checkout.commit_on_branch(start, "fix", pending, "Fix it", ("A", "a@example.org"), ("A", "a@example.org"), None)
    assert (work / "durations.py").read_text() == "fixed\n"
