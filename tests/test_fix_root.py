"""Started in a subdirectory of a git repository, fix and the REPL work in the repository root (with a
note): the model's paths are repository paths and the tests run where they belong."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
from conftest import cli_env, git, make_git_repo, run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPLAY = f"replay:{FIXTURES / 'durations.replay.jsonl'}"


def test_fix_started_in_a_subdirectory_works_in_the_repository_root(tmp_path):
    top = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    (top / "docs").mkdir()
    (top / "docs" / "notes.md").write_text("notes\n")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "docs")
    proc = run_cli("fix", "format_duration(5400) gives 1h90m", "--sandbox", "none", "--model", REPLAY, "--json",
                   cwd=top / "docs", env=cli_env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    note = f"working in the repository root {top.resolve()} (started in {(top / 'docs').resolve()})"
    assert note in result["notes"] and note in " ".join(proc.stderr.split())
    assert result["changed_files"] == ["durations.py"]  # the replay's repository path
    assert result["tests"]["passed"] is True and "test_durations" in result["tests"]["source"]
    assert git(top, "show", "--name-only", "--format=", "HEAD").split() == ["durations.py"]
    assert not (top / "docs" / "durations.py").exists()


def test_repl_started_in_a_subdirectory_works_in_the_repository_root(tmp_path):
    top = make_git_repo(tmp_path / "durations", FIXTURES / "durations")
    (top / "docs").mkdir()
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS="200", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--model", REPLAY, "--sandbox", "none"],
                          cwd=str(top / "docs"), env=environment, encoding="utf-8", timeout=30, dimensions=(40, 200))
    child.expect_exact(f"working in the repository root {top.resolve()}")
    child.expect_exact("clover>")
    child.sendline("format_duration(5400) gives 1h90m")
    child.expect_exact("durations.py (lines 1-")  # view_file of a repository path worked
    child.sendeof()
    child.close(force=True)


def test_an_explicit_repo_option_is_the_project_as_given(tmp_path):
    """--repo names a monorepo's subproject on purpose: it stays the project (no note)."""
    top = make_git_repo(tmp_path / "mono")
    sub = top / "tools" / "durations"
    sub.mkdir(parents=True)
    proc = run_cli("config", "show", "--repo", str(sub), env=cli_env())  # not moved: no note anywhere
    assert proc.returncode == 0 and "repository root" not in proc.stdout + proc.stderr
    proc = run_cli("fix", "x", "--repo", str(sub), "--sandbox", "none", "--model", REPLAY, "--no-commit", "--json",
                   "--max-steps", "1", env=cli_env())
    assert "repository root" not in proc.stderr and not any("repository root" in n for n in json.loads(proc.stdout)["notes"])
