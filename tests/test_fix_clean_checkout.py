"""`fixed` means the commit alone passes (issue 46): the traps where a fix passed only in the working
tree. Each is a real `fix` run (in-process, a replay for the model) on a real git repository; then the
fix branch is cloned into a clean directory and its tests run there, and `fixed` must appear exactly
where that clone passes. The project is tiny and its tests are unittest's, so each run takes about a
second."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_env, git, make_git_repo
from conftest import tool_call_text as call
from conftest import write_replay
from fake_github import fake_github, github_api  # noqa: F401 - fixtures
from rich.console import Console

from clovercode.fixflow.plan import FixRequest
from clovercode.front.fixcmd import run_fix
from clovercode.ground.config import load_config

TESTS = f"{sys.executable} -m unittest -q"
BUGGY = "def add(a, b):\n    return a - b  # bug\n"
PROJECT = {
    "calc.py": BUGGY,
    "test_calc.py": ("import unittest\n\nfrom calc import add\n\n\n"
                     "class CalcTest(unittest.TestCase):\n"
                     "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
                     "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"),
    ".gitignore": "gen/\n*.log\n.venv/\n",
    "helper.py": "def plus(a, b):\n    return a + b\n",
}
ISSUE = "add() subtracts: add(2, 3) gives -1"
FIX = call("edit_file", path="calc.py", old_text="    return a - b  # bug", new_text="    return a + b")


def use(module: str, name: str = "plus") -> str:
    """The fix, as an import of ``name`` from ``module`` (which the trap puts somewhere the commit may miss)."""
    return call("edit_file", path="calc.py", old_text="def add(a, b):\n    return a - b  # bug",
                new_text=f"from {module} import {name}\n\n\ndef add(a, b):\n    return {name}(a, b)")


def run(command: str) -> str:
    return call("run_command", command=command)


PLUS = "def plus(a, b):\n    return a + b\n"
MAKE_GEN = f"mkdir -p gen && printf '{PLUS.replace(chr(10), chr(92) + 'n')}' > gen/plus.py"
BIG = "import os; open('big.txt', 'w').write('x' * (11 << 20))"
BINARY = "open('blob.bin', 'wb').write(bytes(2 << 20))"
TEST_BIG = ("import os, unittest\n\n\nclass BigTest(unittest.TestCase):\n"
            "    def test_big(self):\n        self.assertTrue(os.path.exists('{name}'))\n")

# name: (untracked files the user has before the run, the model's turns before finish, extra tracked files)
TRAPS = {
    # a module a command wrote into an ignored directory: the working tree passes, the commit does not
    "command_ignored_module": ({}, [run(MAKE_GEN), use("gen.plus")], {}),
    # the same module by write_file
    "write_file_ignored_module": ({}, [call("write_file", path="gen/plus.py", content=PLUS), use("gen.plus")], {}),
    # rename of a tracked module, by a command: both sides are in the commit
    "rename": ({}, [run("mv helper.py helpers.py"), use("helpers")], {}),
    # a mode change the tests need: the commit carries it
    "chmod": ({}, [run("chmod +x tool.sh"), FIX], {"tool.sh": "#!/bin/sh\necho ok\n",
                                                     "test_tool.py": "import os, unittest\n\n\nclass ToolTest(unittest.TestCase):\n    def test_runs(self):\n        self.assertTrue(os.access('tool.sh', os.X_OK))\n"}),
    # a symbolic link to a tracked module: committed as a link
    "symlink": ({}, [run("ln -s helper.py alias.py"), use("alias")], {}),
    # an over-size file the tests need is left out
    "over_size": ({}, [run(f"{sys.executable} -c \"{BIG}\""), FIX], {"test_big.py": TEST_BIG.format(name="big.txt")}),
    # a binary over 1 MiB the tests need is left out
    "binary": ({}, [run(f"{sys.executable} -c \"{BINARY}\""), FIX], {"test_blob.py": TEST_BIG.format(name="blob.bin")}),
    # a nested repository holding the module is left out
    "nested_repo": ({}, [run(f"mkdir vendored && cd vendored && git init -q && printf '{PLUS.replace(chr(10), chr(92) + 'n')}' > plus.py"),
                         use("vendored.plus")], {}),
    # the user's untracked file, imported as it is
    "untracked_imported": ({"mine.py": PLUS}, [use("mine")], {}),
    # the user's untracked file, edited and imported
    "untracked_edited": ({"mine.py": "def plus(a, b):\n    return 0\n"},
                         [call("edit_file", path="mine.py", old_text="    return 0", new_text="    return a + b"), use("mine")], {}),
    # a file created and deleted again: nothing of it anywhere
    "created_then_deleted": ({}, [run("echo scratch > notes.tmp && rm notes.tmp"), FIX], {}),
    # tests that write files (an ignored log, an untracked report): the tests', not the change
    "tests_write_files": ({}, [FIX], {"test_writes.py": "import unittest\n\n\nclass W(unittest.TestCase):\n    def test_w(self):\n        open('run.log', 'a').write('x')\n        open('report.txt', 'a').write('x')\n"}),
    # a tracked file the fix needs, dropped from git's view by a command (--cached) but kept on disk
    "untracked_by_command": ({}, [run("git rm -q --cached helper.py && echo helper.py >> .gitignore"), use("helper")], {}),
    # a tracked file deleted: the commit deletes it too, and the clean run shows what that breaks
    "deleted_needed_file": ({}, [use("helper"), run("cp helper.py gen_helper.tmp && rm helper.py && mkdir -p gen && mv gen_helper.tmp gen/helper.py && touch gen/__init__.py"),
                                 call("edit_file", path="calc.py", old_text="from helper import plus", new_text="from gen.helper import plus")], {}),
}
# the traps whose commit alone passes: `fixed` is right there, and only there
PASSES_ALONE = {"rename", "chmod", "symlink", "created_then_deleted", "tests_write_files", "untracked_by_command"}


def project(tmp_path: Path, tracked: dict[str, str], untracked: dict[str, str]) -> Path:
    source = tmp_path / "src"
    for rel, text in {**PROJECT, **tracked}.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    work = make_git_repo(tmp_path / "work", source)
    for rel, text in untracked.items():
        (work / rel).write_text(text)
    return work


def fix(tmp_path: Path, work: Path, turns: list[str], **settings) -> dict:
    # the file tools edit only what the model read
    reads = [call("view_file", path=rel) for rel in ("calc.py", "mine.py") if (work / rel).exists()]
    model = write_replay(tmp_path / "model.jsonl", *reads, *turns, call("finish", summary="add() adds."))
    flags = {"model": f"replay:{model}", "sandbox": "none", "fix.test_command": TESTS, "fix.test_rounds": 0,
             "trajectory_dir": str(tmp_path / "trajectories"), **settings}
    cfg = load_config(work, os.environ, flags)
    with open(os.devnull, "w") as sink:
        outcome = run_fix(work, cfg, FixRequest(issue_text=ISSUE), Console(file=sink))
    return json.loads(json.dumps(outcome.to_json()))


def clone_passes(tmp_path: Path, work: Path, branch: str) -> bool:
    """The fix branch alone: cloned into a fresh directory, its tests run there."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", branch, str(work), str(clone)], check=True, capture_output=True)
    tests = subprocess.run(TESTS.split(), cwd=clone, capture_output=True, text=True, timeout=60)
    return tests.returncode == 0


@pytest.mark.slow  # about 2.5 s each on a loaded 2-core machine: three test runs, a clone and a fourth
@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_fixed_only_where_the_commit_alone_passes(tmp_path, trap):
    untracked, turns, tracked = TRAPS[trap]
    work = project(tmp_path, tracked, untracked)
    result = fix(tmp_path, work, turns)
    assert result["commit"], result
    alone = clone_passes(tmp_path, work, result["branch"])
    assert alone == (trap in PASSES_ALONE), (trap, result["tests"]["clean_checkout"])
    # before: "fixed" for every trap, though the clone failed in eight of them
    assert (result["status"] == "fixed") == alone, (result["status"], result["tests"]["reason"])
    clean = result["tests"]["clean_checkout"]
    assert clean["verified"] and clean["passed"] == alone and clean["seconds"] > 0
    message = git(work, "log", "-1", "--format=%B", result["commit"])
    if not alone:
        assert result["exit_code"] in (1, 9) and message.startswith("Attempt")
        assert "clean checkout" in result["tests"]["reason"]
    else:
        assert result["exit_code"] == 0 and message.startswith("Fix")
    assert git(work, "worktree", "list", "--porcelain").count("worktree ") == 1  # the temporary one is gone
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"clovercode-clean-*/{tmp_path.name}*"))


@pytest.mark.parametrize("sandbox", ["none", "workspace-write"])
def test_what_the_clean_run_missed_is_named(tmp_path, sandbox):
    if sandbox != "none" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    untracked, turns, tracked = TRAPS["command_ignored_module"]
    work = project(tmp_path, tracked, {"mine.txt": "the user's\n"})
    result = fix(tmp_path, work, turns, sandbox=sandbox)  # in the sandbox, the tests run inside the clean checkout
    # before: not_committed was empty and the verdict "fixed": the command's module was named nowhere
    assert "gen/plus.py (ignored by git)" in result["not_committed"]
    clean = result["tests"]["clean_checkout"]
    assert clean["missing_files"] == ["gen/plus.py", "mine.txt"]
    assert "gen/plus.py" in result["tests"]["reason"] and "test_calc" in result["tests"]["reason"]
    assert result["status"] == "tests_failed" and result["exit_code"] == 1  # alone, the test module cannot import


def test_an_over_size_change_alone_is_named_not_nothing(tmp_path):
    work = project(tmp_path, {}, {})
    result = fix(tmp_path, work, [run(f"{sys.executable} -c \"{BIG}\"")])
    # before: exit 4, "Changed: nothing", not_committed empty, "no test command was found"
    assert result["exit_code"] == 4
    assert result["not_committed"] == ["big.txt (over 10 MiB)"]
    assert "no test command" not in result["tests"]["reason"]
    assert result["tests"]["command"] == TESTS


def test_turned_off_in_trusted_settings_says_not_verified(tmp_path):
    work = project(tmp_path, {}, {})
    result = fix(tmp_path, work, [FIX], **{"fix.verify_clean": False})
    assert result["status"] == "fixed"
    assert "not verified in a clean checkout" in result["tests"]["reason"]
    assert result["tests"]["clean_checkout"]["verified"] is False


def test_a_project_file_cannot_turn_it_off(tmp_path):
    work = project(tmp_path, {"clovercode.toml": "[fix]\nverify_clean = false\nbaseline = false\n"}, {})
    cfg = load_config(work, {k: v for k, v in os.environ.items() if not k.startswith("CLOVERCODE_")}, {})
    assert cfg["fix.baseline"] is False  # the file is read: an untrusted project may set this one
    assert cfg["fix.verify_clean"] is True


PROBE = ("import os, unittest\n\n\nclass ProbeTest(unittest.TestCase):\n"
         "    def test_probe(self):\n"
         "        if os.path.islink('.venv'):  # only in the clean checkout: may it write the working tree's?\n"
         "            try:\n                open('.venv/written-by-the-clean-run', 'w').close()\n"
         "            except OSError:\n                pass\n")


def with_venv(tmp_path: Path) -> Path:
    import venv

    work = project(tmp_path, {"test_probe.py": PROBE}, {})
    venv.create(work / ".venv", with_pip=False, symlinks=True)
    return work


@pytest.mark.parametrize("sandbox", ["none", "workspace-write"])
def test_the_project_virtualenv_serves_the_clean_run_read_only(tmp_path, sandbox):
    if sandbox != "none" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    work = with_venv(tmp_path)
    result = fix(tmp_path, work, [FIX], **{"fix.test_command": ".venv/bin/python -m unittest -q", "sandbox": sandbox})
    clean = result["tests"]["clean_checkout"]
    assert result["status"] == "fixed", (result["tests"]["reason"], clean)
    assert clean["linked"] == [".venv"] and clean["passed"]
    if sandbox != "none":  # the sandbox keeps the working tree read-only for the clean run
        assert not (work / ".venv" / "written-by-the-clean-run").exists()
    assert not (work / ".venv").is_symlink() and (work / ".venv" / "pyvenv.cfg").is_file()  # removal left it alone


def test_a_module_written_into_the_virtualenv_never_comes_back_through_the_link(tmp_path):
    work = with_venv(tmp_path)
    site = next((work / ".venv" / "lib").glob("python*/site-packages"))
    write = run(f"printf '{PLUS.replace(chr(10), chr(92) + 'n')}' > {site.relative_to(work)}/plus.py")
    result = fix(tmp_path, work, [write, use("plus")], **{"fix.test_command": ".venv/bin/python -m unittest -q"})
    # the working tree passes (the module is in its .venv); the commit alone cannot
    assert result["tests"]["runs"][-1]["passed"]
    assert result["status"] != "fixed" and result["tests"]["clean_checkout"]["linked"] == []
    assert any(item.startswith(f"{site.relative_to(work)}/plus.py") for item in result["not_committed"])


ONLY_IN_CLEAN = 'case "$PWD" in *clovercode-clean-*) {then};; esac; ' + TESTS


def test_max_time_covers_the_baseline(tmp_path):
    work = project(tmp_path, {}, {})
    started = time.monotonic()
    result = fix(tmp_path, work, [FIX], max_time=1, **{"fix.test_command": f"sleep 20; {TESTS}"})
    # before: the baseline ran its whole 20 s outside the limit
    assert time.monotonic() - started < 8
    assert result["stop_reason"] == "max_time" and result["exit_code"] == 3 and result["commit"] is None
    assert "baseline" in result["detail"]


@pytest.mark.slow  # waits for --max-time (4 s) to cut the clean checkout's tests
def test_max_time_covers_the_clean_checkout_run(tmp_path):
    work = project(tmp_path, {}, {})
    started = time.monotonic()
    result = fix(tmp_path, work, [FIX], max_time=4, **{"fix.test_command": ONLY_IN_CLEAN.format(then="sleep 30")})
    assert time.monotonic() - started < 10
    clean = result["tests"]["clean_checkout"]
    assert clean["timed_out"] and result["status"] == "unverified"
    assert "not verified in a clean checkout" in result["tests"]["reason"]


@pytest.mark.slow  # a real `fix` process, stopped while the clean checkout's tests run (about 5 s)
def test_sigterm_during_the_clean_run_removes_the_checkout(tmp_path):
    work = project(tmp_path, {}, {})
    marker, scratch = tmp_path / "clean-run-started", tmp_path / "tmp"
    scratch.mkdir()
    model = write_replay(tmp_path / "model.jsonl", call("view_file", path="calc.py"), FIX, call("finish", summary="adds"))
    command = ONLY_IN_CLEAN.format(then=f"touch {marker}; sleep 60")
    proc = subprocess.Popen([sys.executable, "-m", "clovercode", "fix", ISSUE, "--repo", str(work), "--sandbox", "none",
                             "--model", f"replay:{model}", "--json", "--test-command", command],
                            env=cli_env(TMPDIR=str(scratch)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    result = json.loads(out)
    assert result["status"] == "interrupted" and "Traceback" not in err
    assert result["error"].endswith("while testing the commit in a clean checkout") and result["commit"] is None
    assert not list(scratch.glob("clovercode-clean-*"))  # the checkout is gone
    assert git(work, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not list((work / ".git").glob("worktrees/clovercode-clean-*"))


@pytest.mark.slow  # the real CLI, a bare origin and the fake GitHub (about 6 s)
def test_a_fix_the_commit_alone_misses_opens_a_draft_that_refs_the_issue(tmp_path, fake_github):  # noqa: F811
    untracked, turns, tracked = TRAPS["command_ignored_module"]
    work = project(tmp_path, tracked, untracked)
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    git(work, "remote", "add", "origin", origin.as_uri())
    git(work, "push", "-q", "origin", "main")
    fake_github.bare_repo = origin
    fake_github.add_repo("octo/calc")
    fake_github.add_issue("octo/calc", 7, "add() subtracts", ISSUE)
    model = write_replay(tmp_path / "model.jsonl", call("view_file", path="calc.py"), *turns,
                         call("finish", summary="add() adds, with a helper."))
    proc = subprocess.run([sys.executable, "-m", "clovercode", "fix", "--github-issue", "octo/calc#7", "--pr",
                           "--repo", str(work), "--sandbox", "none", "--model", f"replay:{model}", "--json",
                           "--test-command", TESTS], capture_output=True, text=True, timeout=300,
                          env=cli_env(GITHUB_TOKEN="ghs_valid_token", CLOVERCODE_GITHUB_API_URL=fake_github.url))
    result = json.loads(proc.stdout)
    # before: exit 0, a ready pull request with "Fixes #7", and a pushed branch that fails alone
    assert proc.returncode == 1 and result["status"] == "tests_failed", proc.stderr
    [create] = fake_github.calls("pulls/create")
    assert create.body["draft"] is True and create.body["title"].startswith("Attempt #7 (breaks tests): ")
    body = create.body["body"]
    assert body.startswith("Refs #7") and "Fixes #7" not in body
    assert "Clean checkout: the commit alone: tests failed" in body and "gen/plus.py" in body
    assert "Clean checkout:" in proc.stderr


def test_the_change_set_names_what_a_command_changed_in_ignored_paths_and_not_what_the_tests_wrote(tmp_path):
    from clovercode.fixflow.changes import TestedTree
    from clovercode.vcs.git import open_checkout

    work = project(tmp_path, {}, {})
    (work / "gen").mkdir()
    (work / "gen" / "old.py").write_text("x = 1\n")
    (work / "gen" / "gone.py").write_text("x = 1\n")
    checkout = open_checkout(work)
    tested = TestedTree(checkout, checkout.start())
    (work / "calc.py").write_text(BUGGY.replace("a - b", "a + b"))
    (work / "gen" / "new.py").write_text("x = 2\n")  # what a command of the model's would do: no file tool knows
    (work / "gen" / "old.py").chmod(0o755)
    (work / "gen" / "gone.py").unlink()
    (work / ".venv" / "lib").mkdir(parents=True)
    for n in range(25):  # a package installed into the virtualenv: one entry, with the count
        (work / ".venv" / "lib" / f"m{n}.py").write_text("")
    assert tested.before_tests([])
    (work / "run.log").write_text("the tests' own log\n")  # written while the tests ran
    tested.after_tests()
    changes, since = tested.to_commit([])
    assert changes.paths == ("calc.py",) and since == []
    # before: none of these was named; the commit left them out silently
    assert [item.describe() for item in changes.left_out] == [
        ".venv/ (ignored by git: 25 files in it changed)", "gen/gone.py (ignored by git, deleted)",
        "gen/new.py (ignored by git)", "gen/old.py (ignored by git)"]


def test_a_subproject_is_tested_in_its_place_of_the_clean_checkout(tmp_path):
    import venv

    source = tmp_path / "src"
    for rel, text in PROJECT.items():
        (source / "sub" / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / "sub" / rel).write_text(text)
    (source / "README").write_text("a monorepo\n")
    top = make_git_repo(tmp_path / "mono", source)
    work = top / "sub"
    venv.create(work / ".venv", with_pip=False, symlinks=True)
    result = fix(tmp_path, work, [FIX], **{"fix.test_command": ".venv/bin/python -m unittest -q"})
    clean = result["tests"]["clean_checkout"]
    assert result["status"] == "fixed" and clean["linked"] == ["sub/.venv"], (result["tests"]["reason"], clean)
    assert result["changed_files"] == ["calc.py"]


@pytest.mark.slow  # waits for --max-time (3 s) to cut the tests after the change
def test_tests_cut_by_max_time_are_neither_a_hang_nor_no_test_command(tmp_path):
    work = project(tmp_path, {}, {})
    slow_after = f"if grep -q 'a + b' calc.py; then sleep 30; fi; {TESTS}"
    result = fix(tmp_path, work, [FIX], max_time=3, **{"fix.test_command": slow_after})
    # before: the cut run was a regression ("the tests hang after the change"), or the reason was
    # "no test command was found" when none was judged
    assert result["status"] == "unverified" and result["exit_code"] == 9
    assert "--max-time" in result["tests"]["reason"] and "no test command" not in result["tests"]["reason"]
    assert result["tests"]["regressions"] == [] and result["tests"]["clean_checkout"] is None
