"""`/fix --attempts N` in the REPL (issue 47): `clovercode fix` on the REPL's model, each attempt a
row of the live region (its step, tokens, what it runs) that ends with its verdict. A real pty read
through a terminal emulator, a real git repository and unittest runs, replay recordings per attempt."""

from __future__ import annotations

import re
import sys
import time

import pexpect
import pytest
from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen
from test_fix_attempts import FIX, VIEW, note, project
from conftest import git, tool_call_text as call, write_replay

from clovercode.front.repl.fixslash import parse_fix
from clovercode.ground.errors import UsageError


def wait_prompts(child: pexpect.spawn, n: int, timeout: float = 60) -> None:
    """Until the screen shows the n-th prompt (the output before it was read off the pty already)."""
    deadline = time.monotonic() + timeout
    while screen_text(child).count(PROMPT) < n:
        assert time.monotonic() < deadline, f"prompt {n} never came:\n{screen_text(child)}"
        try:
            child.read_nonblocking(size=65536, timeout=0.2)
        except pexpect.TIMEOUT:
            pass


@pytest.mark.slow  # a REPL on a pty: two attempts with test runs and a clean check, a plain /fix, a task (about 8 s)
def test_slash_fix_with_attempts_shows_a_row_per_attempt_and_lands_the_chosen_one(tmp_path):
    work = project(tmp_path)
    write_replay(tmp_path / "model.1.jsonl", VIEW, note(1), call("finish", summary="attempt 1"))
    # attempt 2 runs a command long enough for the live region to draw its row mid-run
    write_replay(tmp_path / "model.2.jsonl", VIEW, call("run_command", command="sleep 1.5"), FIX,
                 call("finish", summary="attempt 2"))
    # the REPL's own model: a plain /fix answers without changing anything, then a task after it
    write_replay(tmp_path / "model.jsonl", call("finish", summary="nothing left to fix"), "Still here.")
    child = spawn_repl(work, "--model", f"replay:{tmp_path / 'model.jsonl'}", "--sandbox", "none",
                       CLOVERCODE_FIX_TEST_COMMAND=f"{sys.executable} -m unittest -q", CLOVERCODE_FIX_TEST_ROUNDS="0")
    child.expect_exact(PROMPT)
    child.sendline("/fix --attempts 2 add() subtracts: add(2, 3) gives -1")
    wait_screen(child, "/fix: fixed on branch", timeout=120)
    wait_prompts(child, 2)
    child.sendline("/fix add() subtracts")  # one attempt, on the REPL's model: nothing left to fix
    wait_screen(child, "/fix: no_change", timeout=60)
    wait_prompts(child, 3)
    child.sendline("are you there")  # /fix borrowed the REPL's model and left it open
    wait_screen(child, "Still here.", timeout=60)
    wait_prompts(child, 4)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    raw, screen = child.logfile_read.getvalue(), screen_text(child)
    # the rows were drawn while the attempts ran: both attempts, attempt 2 inside its command…
    assert "attempt 1 of 2 (seed 1, temperature 0)" in raw and "attempt 2 of 2 (seed 2, temperature 0.7)" in raw
    assert re.search(r"attempt 2 of 2 \(seed 2, temperature 0\.7\) · running run_command · step 2 · \d+ tokens", raw)
    assert re.search(r"\d of 2 attempts running", raw)
    # …and erased; what stays is each attempt's verdict, the choice and the outcome
    assert "attempts running" not in screen
    assert re.search(r"↳ attempt 1: unverified .*\d+ tokens", screen) and "↳ attempt 2: fixed" in screen
    assert "chose attempt 2 of 2" in screen
    branch = re.search(r"/fix: fixed on branch (\S+)", screen).group(1)
    assert "return a + b" in git(work, "show", f"{branch}:calc.py")
    assert git(work, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize("typed, expected", [
    ("--attempts 3 add() subtracts", (3, False, "add() subtracts")),
    ("--attempts=2 --first it's  broken\nsee --attempts", (2, True, "it's  broken\nsee --attempts")),
    ("add() subtracts --first", (None, False, "add() subtracts --first")),
])
def test_fix_flags_come_first_and_the_issue_is_kept_as_typed(typed, expected):
    assert parse_fix(typed) == expected


@pytest.mark.parametrize("typed, says", [
    ("--atempts 3 add() subtracts", "/fix does not know '--atempts'"),
    ("--attempts 0 x", "--attempts takes a number from 1 to 16"),
    ("--attempts 17 x", "--attempts takes a number from 1 to 16"),
    ("--attempts", "--attempts takes a number from 1 to 16, got 'nothing'"),
    ("--first x", "--first needs --attempts N"),
    ("--attempts 2", "/fix needs the issue"),
    ("--push x", "/fix does not know '--push'"),
])
def test_bad_fix_flags_are_refused_with_a_clear_error(typed, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        parse_fix(typed)


def test_a_bad_slash_fix_is_said_and_the_repl_goes_on():
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from clovercode.front.repl.commands import default_commands

    out = io.StringIO()
    [fix] = [c for c in default_commands() if c.name == "fix"]
    assert fix.run(SimpleNamespace(console=Console(file=out, width=200)), "--atempts 2 add() subtracts") is True
    assert "error: /fix does not know '--atempts'" in out.getvalue() and "Traceback" not in out.getvalue()
