"""The commit is exactly the tree that was tested (issue 35): the change is the working tree's whole
difference from the start, whoever wrote it (a file tool or a command); the CI-definition rules apply
to all of it; files left out on purpose are named. Real git repositories; replays stand in for the
model; the real CLI in a subprocess for the end-to-end cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import cli_env, git, make_git_repo, run_cli
from conftest import tool_call_text as call
from conftest import write_replay as replay

from clovercode.vcs.changeset import MAX_BINARY_BYTES
from clovercode.vcs.git import open_checkout

STATS = {
    "stats.py": "def mean(xs):\n    return sum(xs) // len(xs)  # bug: floor division\n",
    "test_stats.py": "from stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2]) == 1.5\n",
}
HELPER = "def true_div(a, b):\n    return a / b\n"
HEREDOC = f"cat > stats_helper.py <<'EOF'\n{HELPER}EOF"
USE_HELPER = call("edit_file", path="stats.py", old_text="    return sum(xs) // len(xs)  # bug: floor division",
                  new_text="    from stats_helper import true_div\n\n    return true_div(sum(xs), len(xs))")


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    source = tmp_path / "src"
    for rel, text in files.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    return make_git_repo(tmp_path / "work", source)


def fix(work: Path, model: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                   "--test-command", f"{sys.executable} -m pytest -q -p no:cacheprovider", *args, timeout=300)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout\nstdout: {proc.stdout}\nstderr: {proc.stderr}") from None


def test_a_module_a_command_wrote_is_committed_and_the_commit_alone_passes(tmp_path):
    work = project(tmp_path, STATS)
    model = replay(tmp_path / "m.jsonl", call("run_command", command=HEREDOC), call("view_file", path="stats.py"),
                   USE_HELPER, call("finish", summary="mean() divides with a helper module."))
    proc, result = fix(work, model, "mean() floors its result")
    # before: exit 0 and a commit without stats_helper.py, whose tree alone failed
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "fixed" and result["not_committed"] == []
    committed = git(work, "show", "--name-only", "--format=", result["commit"]).split()
    assert sorted(committed) == ["stats.py", "stats_helper.py"]
    assert {f["path"] for f in result["diffstat"]} == {"stats.py", "stats_helper.py"}
    alone = tmp_path / "alone"
    git(work, "worktree", "add", "-q", "--detach", str(alone), result["commit"])
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=alone,
                           capture_output=True, text=True, timeout=120)
    assert tests.returncode == 0, tests.stdout
    assert git(work, "status", "--porcelain") == ""  # the index holds the commit: nothing is shown as left over


def test_a_workflow_a_command_creates_outside_the_sandbox_is_refused(tmp_path):
    work = project(tmp_path, STATS)
    write = "mkdir -p .github/workflows && printf 'on: push\\n' > .github/workflows/x.yml"
    model = replay(tmp_path / "m.jsonl", call("run_command", command=write), call("view_file", path="stats.py"),
                   call("edit_file", path="stats.py", old_text="sum(xs) // len(xs)", new_text="sum(xs) / len(xs)"),
                   call("finish", summary="True division."))
    proc, result = fix(work, model, "mean() floors its result")
    # before: exit 0, the workflow neither committed nor reported
    assert proc.returncode == 8, proc.stderr
    assert result["ci_changes_refused"] == [".github/workflows/x.yml"] and result["commit"] is None
    assert (work / ".github" / "workflows" / "x.yml").exists()  # nothing lost: the change stays in the tree


def test_the_change_set_is_every_difference_less_what_is_left_out_on_purpose(tmp_path):
    work = project(tmp_path, {"a.py": "a\n", "b.py": "b\n", "run.sh": "echo\n", "old.txt": "x\n",
                              ".gitignore": "build/\n"})
    (work / "mine.txt").write_text("the user's\n")
    checkout = open_checkout(work)
    start = checkout.start()
    (work / "a.py").write_text("a changed\n")
    (work / "b.py").unlink()
    (work / "run.sh").chmod(0o755)
    git(work, "mv", "old.txt", "new.txt")  # a rename a command staged in the user's index
    (work / "made.py").write_text("by a command\n")
    (work / "build").mkdir()
    (work / "build" / "out.py").write_text("ignored\n")
    (work / "blob.bin").write_bytes(b"\0" * (MAX_BINARY_BYTES + 1))
    (work / "inner").mkdir()
    git(work / "inner", "init", "-q")
    (work / "inner" / "f").write_text("x\n")
    changes = checkout.changes(start, ["build/out.py", "a.py"])
    assert changes.paths == ("a.py", "b.py", "made.py", "new.txt", "old.txt", "run.sh")
    assert [i.describe() for i in changes.left_out] == ["blob.bin (binary, over 1 MiB)", "build/out.py (ignored by git)",
                                                         "inner (a nested git repository)"]
    listed = git(work, "ls-tree", "-r", "--format=%(objectmode) %(path)", changes.tree).splitlines()
    assert "100755 run.sh" in listed and "100644 made.py" in listed and not any("b.py" in p for p in listed)
    (work / "mine.txt").unlink()
    assert "mine.txt (untracked before the run, deleted)" in [i.describe() for i in checkout.changes(start).left_out]
    assert git(work, "diff", "--cached", "--name-only", "--no-renames").split() == ["new.txt", "old.txt"]  # the user's index untouched


GCD = {
    "gcd.py": "def gcd(a, b):\n    return gcd(b, a % b)  # bug: never stops at b == 0\n",
    "test_gcd.py": ("import unittest\n\nfrom gcd import gcd\n\n\nclass GcdTest(unittest.TestCase):\n"
                    "    def test_gcd(self):\n        self.assertEqual(gcd(35, 21), 7)\n"),
}
GCD_BUG = "    return gcd(b, a % b)  # bug: never stops at b == 0"


def test_a_short_name_and_a_hang_each_start_a_feedback_round(tmp_path):
    """gcd() ties test_gcd (before: names of three letters never did, and the run ended 9 with no
    feedback); a change that makes the finished suite hang is a regression the model is told about."""
    work = project(tmp_path, GCD)
    model = replay(tmp_path / "m.jsonl",
                   call("view_file", path="gcd.py"),
                   call("edit_file", path="gcd.py", old_text=GCD_BUG, new_text=GCD_BUG + "\n    # TODO"),
                   call("finish", summary="Looked at it."),
                   call("edit_file", path="gcd.py", old_text=GCD_BUG, new_text="    while True:\n        pass"),
                   call("finish", summary="Loops instead."),
                   call("edit_file", path="gcd.py", old_text="    while True:\n        pass",
                        new_text="    return a if b == 0 else gcd(b, a % b)"),
                   call("finish", summary="Stops at b == 0."))
    proc = run_cli("fix", "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                   "--test-command", f"{sys.executable} -m unittest -q", "--test-rounds", "3",
                   "gcd() never returns", env=cli_env(CLOVERCODE_FIX_TEST_TIMEOUT="8"), timeout=300)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    runs = result["tests"]["runs"]
    assert [r["timed_out"] for r in runs] == [False, True, False] and runs[-1]["passed"]
    feedback = [json.loads(line) for line in Path(result["trajectory"]).read_text().splitlines()]
    told = [e for e in feedback if e.get("kind") == "run_start" and "feedback round" in str(e.get("task", ""))]
    assert len(told) == 2 and "test_gcd" in told[0]["task"] and "timed out" in told[1]["task"]
