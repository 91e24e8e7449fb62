"""Keys during a REPL turn, on a real pty read through pyte: Esc interrupts as Ctrl-C does (the model
writing, a command running), typed keys do not echo into the output and start the next prompt,
arrow keys are not Esc, and a running command has a status line that is gone when it ends."""

from __future__ import annotations

import json
import re

import pexpect

from openai_stub import StubServer, chunk, stall_after
from pty_screen import PROMPT, screen_text, spawn_repl, wait_screen
from test_parser_table import xml

INTERRUPTED = "■ stopped: interrupted by the user (Ctrl-C)"  # what Ctrl-C has always shown
ESC_STOPPED = "■ stopped: interrupted by the user (Esc)"  # the same stop, named by the key that made it
HINT = "Esc/Ctrl-C interrupts"


def replay_file(tmp_path, *turns: str):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return path


def between(screen: str, start: str, end: str) -> str:
    return screen[screen.index(start):screen.index(end)]


def test_esc_during_a_command_interrupts_and_typed_keys_wait_for_the_next_prompt(calc_repo, tmp_path):
    replay = replay_file(tmp_path, xml("run_command", command="sleep 60"), "The answer is 42.")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "full-auto")
    child.expect_exact(PROMPT)
    child.sendline("run something slow")
    wait_screen(child, "running `sleep 60`")
    assert re.search(r"running `sleep 60` · \d+s · .*Esc/Ctrl-C interrupts", screen_text(child))
    child.send("draft")  # typed while the command runs: not echoed
    child.send("\x1b")  # Esc
    child.expect_exact("interrupted by the user")
    child.expect_exact(PROMPT)
    wait_screen(child, f"{PROMPT} draft")  # …but kept as the start of the next input
    child.send(" answer\r")
    child.expect_exact("The answer is 42.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    screen = screen_text(child)
    turn = between(screen, "→ run_command", ESC_STOPPED)
    assert "draft" not in turn and "^[" not in turn and "\\x1b" not in turn
    assert HINT not in screen  # the status line was erased with the command
    assert f"{PROMPT} draft answer" in screen
    assert screen.count(ESC_STOPPED) == 1


def test_after_an_approval_arrows_and_letters_do_not_interrupt_the_command_and_its_status_line_goes(calc_repo, tmp_path):
    replay = replay_file(tmp_path, xml("run_command", command="sleep 3; echo slept-well"), "Finished.")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "suggest")
    child.expect_exact(PROMPT)
    child.sendline("nap")
    child.expect_exact("Run it?")  # the question stops the key watcher and the status line…
    child.sendline("y")
    wait_screen(child, "running `sleep 3")  # …which come back once the command may run
    child.send("\x1b[A\x1b[Bq")  # Up, Down (escape sequences, not Esc) and a letter
    child.expect_exact("slept-well")
    child.expect_exact("Finished.")
    child.expect_exact(PROMPT)
    wait_screen(child, f"{PROMPT} q")
    screen = screen_text(child)
    assert "interrupted" not in screen
    assert HINT not in screen and "running `sleep 3" not in screen  # cleared when the command ended
    assert re.search(r"running `sleep 3; echo slept-well` · \d+s", child.logfile_read.getvalue())  # it was drawn
    assert "^[" not in screen and "[A" not in screen
    child.send("\x15/exit\r")  # Ctrl-U clears the kept text
    child.expect(pexpect.EOF)


def test_esc_during_generation_stops_like_ctrl_c_and_arrows_at_the_prompt_recall_history(calc_repo):
    with StubServer(["clover"]) as stub:
        stub.script += [stall_after([chunk({"content": "Thinking about the answer"})], 60),
                        stall_after([chunk({"content": "Thinking again"})], 60)]
        child = spawn_repl(calc_repo, "--endpoint", stub.url, "--sandbox", "none")
        child.expect_exact(PROMPT)
        child.sendline("tell me the answer")
        wait_screen(child, "Thinking about the answer")
        wait_screen(child, HINT)  # the model's status line says Esc too
        child.send("\x1b")
        child.expect_exact("interrupted by the user")
        child.expect_exact(PROMPT)
        child.send("\x1b[A")  # Up at the prompt: the last input again, not an Esc
        wait_screen(child, f"{PROMPT} tell me the answer")
        child.send("\r")
        wait_screen(child, "Thinking again")
        child.sendintr()  # Ctrl-C, for comparison
        child.expect_exact("interrupted by the user")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    screen = screen_text(child)
    assert screen.count(ESC_STOPPED) == 1 and screen.count(INTERRUPTED) == 1  # the same stop, each key named
    assert "Thinking about the answer" in screen and "^[" not in screen
    assert len(stub.posts) == 2


def test_esc_interrupts_a_bang_command_with_its_status_line(calc_repo, tmp_path):
    replay = replay_file(tmp_path, "unused")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "full-auto")
    child.expect_exact(PROMPT)
    child.sendline("!sleep 60")
    wait_screen(child, "running `sleep 60`")
    child.send("\x1b")
    child.expect_exact("interrupted")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert HINT not in screen_text(child)


def test_no_status_line_when_the_output_is_not_a_terminal(calc_repo, tmp_path):
    from conftest import run_cli

    replay = replay_file(tmp_path, xml("run_command", command="sleep 1; echo done-here"), "Ok.")
    proc = run_cli("--model", f"replay:{replay}", "--approval", "full-auto", cwd=calc_repo,
                   input="run it\n!sleep 1\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "done-here" in proc.stdout
    assert "interrupts" not in proc.stdout + proc.stderr and "running `" not in proc.stdout + proc.stderr


def test_sigterm_during_a_turn_gives_the_terminal_back(calc_repo, tmp_path):
    import signal
    import termios

    replay = replay_file(tmp_path, xml("run_command", command="sleep 60"), "never")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "full-auto")
    child.expect_exact(PROMPT)
    child.sendline("run something slow")
    wait_screen(child, "running `sleep 60`")
    lflags = termios.tcgetattr(child.child_fd)[3]  # a pty's master reports its terminal's settings
    assert not lflags & termios.ECHO and not lflags & termios.ICANON and lflags & termios.ISIG
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    lflags = termios.tcgetattr(child.child_fd)[3]
    assert lflags & termios.ECHO and lflags & termios.ICANON
    child.close()
    assert child.exitstatus == 143


def test_enter_during_a_turn_queues_a_message_shown_under_the_status_line_and_sent_when_the_turn_ends(calc_repo, tmp_path):
    replay = replay_file(tmp_path, xml("run_command", command="sleep 3"), "First done.", "Second answer.")
    child = spawn_repl(calc_repo, "--model", f"replay:{replay}", "--approval", "full-auto")
    child.expect_exact(PROMPT)
    child.sendline("start slow")
    wait_screen(child, "running `sleep 3`")
    child.send("then the next\r")
    wait_screen(child, "queued: then the next")
    child.send("oops\r")
    wait_screen(child, "queued: oops")
    child.send("\x7f\x15")  # Backspace on an empty line takes "oops" back, Ctrl-U clears it
    child.expect_exact("First done.")
    child.expect_exact("Second answer.")  # the queued message went as the next turn, unasked
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    screen = screen_text(child)
    assert f"{PROMPT} then the next" in screen and "oops" not in screen.split("First done.")[1]
    assert "queued:" not in screen  # the live region, with its queue, is gone


def test_ctrl_g_writes_the_prompt_in_the_editor_and_enter_sends_what_it_saved(calc_repo, tmp_path, isolated_home):
    editor = tmp_path / "editor.sh"  # an editor that appends a line to the draft it is handed, and saves
    editor.write_text('#!/bin/sh\nprintf \'%s then edited\\n\' "$(cat "$1")" > "$1"\n')
    editor.chmod(0o755)
    child = spawn_repl(calc_repo, "--model", f"replay:{replay_file(tmp_path, 'Got it.')}", VISUAL="", EDITOR=str(editor))
    child.expect_exact(PROMPT)
    child.send("typed here")
    child.send("\x07")  # Ctrl-G
    wait_screen(child, f"{PROMPT} typed here then edited")
    child.send("\r")
    child.expect_exact("Got it.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    [trajectory] = (isolated_home / ".local" / "state" / "clovercode" / "trajectories").glob("*.jsonl")
    assert "typed here then edited" in trajectory.read_text()  # what the model was sent
