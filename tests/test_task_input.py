"""One rule for a task's text in the REPL, `fix` and `exec` (taskinput.py): empty and over-long tasks
are refused the same way everywhere; a fetched issue is cut with a note; `--repo` must be a directory."""

from __future__ import annotations

import json

import pytest
from conftest import make_git_repo, run_cli

from clovercode.ground.errors import UsageError
from clovercode.ground.taskinput import MAX_TASK_CHARS, check_task, cut_middle, cut_to_limit, is_blank


@pytest.mark.parametrize("text", ["", "   \n\t", "# ", "#", "##\n\n---\n", "> ", "```\n```", "* * *"])
def test_blank_or_markup_only_text_is_empty(text):
    assert is_blank(text)
    with pytest.raises(UsageError, match="the task is empty"):
        check_task(text)


@pytest.mark.parametrize("text", ["fix it", "# mean() is wrong", "1", "?", "#42 crashes"])
def test_any_word_is_a_task(text):
    assert check_task(text) == text


def test_over_the_limit_is_refused_at_the_limit_accepted():
    assert check_task("x" * MAX_TASK_CHARS)
    with pytest.raises(UsageError, match="the task is 200,001 characters; at most 200,000 are accepted"):
        check_task("x" * (MAX_TASK_CHARS + 1))


def test_cuts_keep_head_and_tail_and_say_so():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    cut = cut_middle(text, 1000)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "characters of the task were cut here" in cut
    assert len(cut) < 1200 and cut_middle("short", 1000) == "short"
    fetched = cut_to_limit("y" * (MAX_TASK_CHARS + 5))
    assert fetched.startswith("y" * MAX_TASK_CHARS) and "the rest (5 characters) was cut" in fetched


def test_an_issue_file_holding_only_a_heading_mark_is_refused(calc_repo, tmp_path):
    issue = tmp_path / "issue.md"
    issue.write_text("# \n")
    proc = run_cli("fix", "--issue-file", str(issue), "--repo", str(calc_repo), "--model", "replay:/nonexistent",
                   "--sandbox", "none")
    assert proc.returncode == 2 and f"error: the issue file {issue} is empty (only Markdown marks)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_repo_naming_a_file_says_it_is_not_a_directory(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("x")
    for args in (("fix", "x", "--repo", str(file)), ("ci", "init", "--repo", str(file))):
        proc = run_cli(*args)
        assert proc.returncode == 2 and f"--repo {file} is a file, not a directory" in proc.stderr, proc.stderr
        assert "not found" not in proc.stderr


def test_the_repl_and_fix_refuse_an_over_long_task_the_same_way(tmp_path):
    repo = make_git_repo(tmp_path / "repo")
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": "Plain answer."}) + "\n")
    huge = "the log says " + "x" * MAX_TASK_CHARS
    message = f"is {len(huge):,} characters; at most 200,000 are accepted"
    repl = run_cli("--model", f"replay:{replay}", "--sandbox", "none", cwd=repo, input=f"{huge}\nshort question\n/exit\n")
    assert repl.returncode == 0, repl.stderr
    out = " ".join(repl.stdout.split())
    assert f"error: the task {message}" in out  # refused, not squeezed into the prompt silently
    assert "Plain answer." in out  # the REPL stays open; the next task runs (and gets the only turn)
    issue = tmp_path / "issue.md"
    issue.write_text(huge)  # a file: one command-line argument cannot hold this much
    fix = run_cli("fix", "--issue-file", str(issue), "--repo", str(repo), "--model", f"replay:{replay}", "--sandbox", "none")
    assert fix.returncode == 2 and f"error: the issue file {issue} {message}" in fix.stderr
