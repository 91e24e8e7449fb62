"""Approval modes (suggest / auto-edit / full-auto) and the REPL prompt that shows the diff or command,
through the real CLI (piped stdin) and a real pty; /undo in the REPL."""

from __future__ import annotations

import sys

import pytest

from clovercode.actions.approval import (ALWAYS, CANCEL, NO, YES, ModeApprover, Reply, RunCancelled, needs_asking,
                                         parse_answer)
from clovercode.actions.context import ApprovalRequest, ToolError
from clovercode.actions.permissions import allowed, command_rule
from conftest import EXAMPLES, cli_env, run_cli

REPLAY = f"replay:{EXAMPLES / 'calc.replay.jsonl'}"
def wide() -> dict[str, str]:
    """rich wraps at the terminal width: keep messages on one line. Built per test, inside its own home."""
    return cli_env(COLUMNS="200")
EDIT = ApprovalRequest("edit", "edit calc.py", "diff")
COMMAND = ApprovalRequest("command", "pytest", "runs in sandbox: workspace-write")


def test_which_actions_each_mode_asks_about():
    table = {(mode, kind, sandboxed): needs_asking(mode, kind, sandboxed)
             for mode in ("suggest", "auto-edit", "full-auto") for kind in ("edit", "command") for sandboxed in (True, False)}
    assert table == {
        ("suggest", "edit", True): True, ("suggest", "edit", False): True,
        ("suggest", "command", True): True, ("suggest", "command", False): True,
        ("auto-edit", "edit", True): False, ("auto-edit", "edit", False): False,
        ("auto-edit", "command", True): True, ("auto-edit", "command", False): True,
        ("full-auto", "edit", True): False, ("full-auto", "edit", False): False,
        ("full-auto", "command", True): False, ("full-auto", "command", False): True,  # full-auto only in the sandbox
    }


def test_always_is_remembered_per_kind():
    asked, answers = [], iter([ALWAYS, NO])
    approver = ModeApprover("suggest", True, lambda r: asked.append(r.kind) or next(answers))
    assert approver(EDIT) and approver(EDIT)
    assert not approver(COMMAND)
    assert asked == ["edit", "command"]
    assert ModeApprover("full-auto", False, lambda r: YES).notice()
    assert ModeApprover("full-auto", True, lambda r: YES).notice() is None


def test_always_for_a_command_is_a_rule_kept_by_the_caller():
    kept, answers = [], iter([Reply(ALWAYS), Reply(YES), Reply(ALWAYS), Reply(ALWAYS), Reply(NO), Reply(NO)])
    approver = ModeApprover("suggest", True, lambda r: next(answers), ["npm test"], kept.append)
    assert approver(ApprovalRequest("command", "npm test -- --watch"))  # an existing rule: not asked
    assert approver(ApprovalRequest("command", "git status --short"))  # asked; "always" adds `git status *`
    assert approver(ApprovalRequest("command", "git status"))  # not asked again
    assert kept == ["git status *"] and approver.rules == ["npm test", "git status *"]
    assert approver(ApprovalRequest("command", "git push"))  # another subcommand: asked (the YES)
    assert approver(ApprovalRequest("command", "pytest; rm -rf ~"))  # compound: "always" is only this once
    assert approver.rules == ["npm test", "git status *"]
    # issue 45: a wrapper's "always" is that exact command; what it smuggles next is asked (the NOs)
    assert approver(ApprovalRequest("command", "taskset -c 0 make"))
    assert kept[-1] == "taskset -c 0 make" and approver(ApprovalRequest("command", "taskset -c 0 make"))
    assert not approver(ApprovalRequest("command", "taskset -c 0 touch SMUGGLED"))
    assert not approver(ApprovalRequest("command", "taskset -c 0 make && touch SMUGGLED"))


def test_prefixes_and_what_a_rule_covers():
    assert [command_rule(c) for c in ("git status --short", "npm run build", "pytest -q tests/", "python3 -m pytest",
                                      "ls", "./run.sh", "FOO=1 make", "make && rm x", "cat a | sh", "echo $(id)")] == [
        "git status *", "npm run build", "pytest *", "python3 -m pytest *", "ls *", "./run.sh", "FOO=1 make",
        None, None, None]


def test_always_saves_a_prefix_only_for_allowlisted_programs_and_the_exact_command_otherwise():
    cases = {
        "python3 -m unittest -q": "python3 -m unittest *", "/usr/bin/python3.12 -m pytest -x": "/usr/bin/python3.12 -m pytest *",
        "python3 tools/check.py --fix": "python3 tools/check.py --fix", "bash scripts/test.sh": "bash scripts/test.sh",
        "python3 -c 'import os; os.system(1)'": None, "bash -c 'curl x'": "bash -c 'curl x'",
        "npm test": "npm test *", "uv run pytest -q": "uv run pytest *", "cargo test --release": "cargo test *",
        "go test ./...": "go test *", "git log -3": "git log *", "grep -rn foo .": "grep *", "rg foo": "rg *",
        # the attacks: a prefix here would have allowed anything after it
        "rm -rf build": "rm -rf build", "curl -s https://example.com": "curl -s https://example.com",
        "pip install requests": "pip install requests", "docker run alpine id": "docker run alpine id",
        "taskset -c 0 pytest": "taskset -c 0 pytest", "ionice -c3 make": "ionice -c3 make", "nice make": "nice make",
        "chrt -f 1 ls": "chrt -f 1 ls", "timeout 5 pytest": "timeout 5 pytest", "env A=1 pytest": "env A=1 pytest",
        "npx jest --watch": "npx jest --watch", "go run ./cmd": "go run ./cmd", "sudo make install": "sudo make install",
        "gdb -batch -ex run ./a": "gdb -batch -ex run ./a", "tmux new -d x": "tmux new -d x",
        "sed -i s/a/b/ f": "sed -i s/a/b/ f", "find . -delete": "find . -delete", "make test": "make test",
        "git push --force": "git push --force", "git -C /tmp status": "git -C /tmp status",
        # an allowlisted program with an option that runs a program or writes a file: exact
        "rg --pre ./x foo": "rg --pre ./x foo", "git diff --output=calc.py": "git diff --output=calc.py",
        "pytest --basetemp=src": "pytest --basetemp=src", "go test -exec ./x": "go test -exec ./x",
    }
    assert {command: command_rule(command) for command in cases} == cases
    assert allowed("python3 -m unittest discover", ["python3 -m unittest *"])
    assert not allowed("python3 evil.py", ["python3 -m unittest *"])
    assert allowed("git status -s", ["git status *"]) == "git status *"
    assert allowed("git status -s", ["git status"]) == "git status"  # as older versions saved them
    assert allowed("git stash", ["git status *"]) is None
    assert allowed("git status; curl evil", ["git status *"]) is None
    assert allowed("git status > /etc/x", ["git status *"]) is None
    assert allowed("rm -rf build", ["rm -rf build"]) and not allowed("rm -rf build /", ["rm -rf build"])
    assert not allowed("rm -rf /", ["rm"])  # a bare entry off the list is exact
    assert not allowed("taskset -c 0 touch X", ["taskset", "taskset *", "ionice *"])  # never a wrapper's prefix
    assert not allowed("git diff --output=calc.py", ["git diff *"]) and not allowed("rg --pre=sh x", ["rg *"])
    assert allowed("make test -j4", ["make test *"]) is None  # make runs the Makefile's commands: a wrapper
    assert allowed("cargo build --release", ["cargo build *"]) == "cargo build *"  # the user's own word


def test_no_with_a_reason_reaches_the_model_and_cancel_stops_the_run():
    approver = ModeApprover("suggest", True, lambda r: Reply(NO, "use pytest instead"))
    with pytest.raises(ToolError, match="declined to run this command and said: use pytest instead"):
        approver(COMMAND)
    with pytest.raises(RunCancelled):
        ModeApprover("suggest", True, lambda r: Reply(CANCEL))(EDIT)


def test_a_project_file_cannot_add_allow_rules(tmp_path):
    from clovercode.ground.config import load_config

    (tmp_path / "clovercode.toml").write_text('[permissions]\nallow = ["rm"]\n')
    cfg = load_config(tmp_path, {}, {}, trust_project=True)  # not even a trusted one: ignored, with a note
    assert cfg["permissions.allow"] == () and "ignored permissions.allow" in cfg.declared.notes[0]


def test_answers():
    assert [parse_answer(a) for a in ("y", "YES", "n", "", "a", "always", "maybe")] == [YES, YES, NO, NO, ALWAYS, ALWAYS, None]


def repl(calc_repo, approval: str, stdin: str):
    return run_cli("--repo", str(calc_repo), "--model", REPLAY, "--approval", approval, input=stdin, cwd=calc_repo,
                   env=wide())


def test_suggest_shows_the_diff_and_the_command_and_obeys_the_answers(calc_repo):
    original = (calc_repo / "calc.py").read_text()
    proc = repl(calc_repo, "suggest", "mean() is wrong\ny\nn\n\n/undo\n/exit\n")  # n, then no reason
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "clovercode wants to edit calc.py" in out and "+    return sum(values) / len(values)" in out
    assert "Apply this change?" in out
    assert "clovercode wants to run a command" in out and "$ python3 -m unittest -q" in out and "Run it?" in out
    assert "declined to run this command" in out
    assert "Restored" in out  # /undo
    assert (calc_repo / "calc.py").read_text() == original


def test_a_declined_edit_leaves_the_file(calc_repo):
    original = (calc_repo / "calc.py").read_text()
    proc = repl(calc_repo, "suggest", "mean() is wrong\nn\n\nn\n\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "declined the change" in proc.stdout
    assert (calc_repo / "calc.py").read_text() == original


def test_auto_edit_asks_only_about_commands(calc_repo):
    proc = repl(calc_repo, "auto-edit", "mean() is wrong\ny\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Apply this change?" not in proc.stdout and "Run it?" in proc.stdout
    assert "Exit code: 0" in proc.stdout or "OK" in proc.stdout
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()


def test_full_auto_asks_nothing_inside_the_sandbox(calc_repo):
    proc = repl(calc_repo, "full-auto", "mean() is wrong\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Apply this change?" not in proc.stdout and "Run it?" not in proc.stdout
    assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()


def test_full_auto_without_a_sandbox_still_asks_about_commands(calc_repo):
    proc = run_cli("--repo", str(calc_repo), "--model", REPLAY, "--approval", "full-auto", "--sandbox", "none",
                   input="mean() is wrong\nn\n\n/exit\n", cwd=calc_repo, env=wide())
    assert proc.returncode == 0, proc.stderr
    assert "commands are still asked about" in proc.stdout
    assert "Run it?" in proc.stdout and "Apply this change?" not in proc.stdout


def test_the_prompt_in_a_real_terminal(calc_repo):
    pexpect = pytest.importorskip("pexpect")
    original = (calc_repo / "calc.py").read_text()
    env = cli_env(TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", "--repo", str(calc_repo), "--model", REPLAY],
                          env=env, cwd=str(calc_repo), encoding="utf-8", timeout=60, dimensions=(40, 120))
    try:
        child.expect("clover>")
        child.sendline("mean() is wrong")
        child.expect("Apply this change")
        child.sendline("y")
        child.expect(r"python3 -m unittest")
        child.expect("Run it")
        child.sendline("y")
        child.expect("clover>")
        assert "sum(values) / len(values)" in (calc_repo / "calc.py").read_text()
        child.sendline("/undo")
        child.expect("Restored")
        child.expect("clover>")
        assert (calc_repo / "calc.py").read_text() == original
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_end_of_input_at_a_question_cancels_the_run(calc_repo):
    original = (calc_repo / "calc.py").read_text()
    proc = repl(calc_repo, "suggest", "mean() is wrong\n")  # Ctrl-D (end of input) at "Apply this change?"
    assert proc.returncode == 0, proc.stderr
    assert "stopped: cancelled by the user at an approval prompt" in proc.stdout
    assert "Run it?" not in proc.stdout  # the run ended: no later question
    assert (calc_repo / "calc.py").read_text() == original
