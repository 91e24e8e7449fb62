"""Resizing the terminal while the model streams (issue 38): nothing of the live region is left behind,
on the screen or in its scrollback, whether the terminal got narrower, shorter or both.

The screen is pyte's, resized the way xterm, VTE and tmux do it: the cursor keeps its line, rows that
no longer fit above it scroll into the scrollback, columns past the new width are cut. (pyte's own
resize drops the top rows and leaves the cursor where it was, which no terminal in use does.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pexpect
import pytest

from conftest import cli_env
from openai_stub import StubServer, chunk, sse
from pty_screen import PROMPT, ROWS, COLS, play, spawn_repl, wait_screen

ROW_TEXT = [f"row{n:02d} " + "lorem ipsum dolor sit amet " * 3 for n in range(40)]


def test_the_resize_model_keeps_the_cursor_on_its_line_and_scrolls_the_rest_away():
    # 6 rows written at 10x40, then 4 rows: the top two go to the scrollback, the cursor stays on "f"
    screen = play([("a\r\nb\r\nc\r\nd\r\ne\r\nf", (10, 40)), ("!", (4, 3))])
    assert screen.splitlines() == ["a", "b", "c", "d", "e", "f!"]


def drain(child: pexpect.spawn) -> None:
    """Read what the child wrote so far (it is stopped: nothing more comes)."""
    while True:
        try:
            child.read_nonblocking(size=65536, timeout=0.3)
        except pexpect.TIMEOUT:
            return


@pytest.mark.parametrize("size", [(12, 60), (ROWS, 50)], ids=["shorter-and-narrower", "narrower"])
def test_resizing_while_the_model_streams_leaves_no_stale_lines(calc_repo, size):
    with StubServer(["clover"]) as stub:
        stub.script += [sse([chunk({"content": line + "\n\n"}) for line in ROW_TEXT], pause=0.06)]
        child = spawn_repl(calc_repo, "--endpoint", stub.url, "--sandbox", "none", sized_by_env=False)
        child.expect_exact(PROMPT)
        child.sendline("write forty rows")
        wait_screen(child, "row12")
        # Stopped while the terminal changes size, so every byte before the change was drawn for the old
        # size and every byte after for the new one. (A frame in flight as a terminal shrinks wraps on any
        # terminal, and no program can erase what it cannot know wrapped: that race is not tested here.)
        child.kill(signal.SIGSTOP)
        drain(child)
        before = child.logfile_read.getvalue()
        child.setwinsize(*size)
        child.kill(signal.SIGCONT)
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    after = child.logfile_read.getvalue()[len(before):]
    screen = play([(before, (ROWS, COLS)), (after, size)])
    for n in range(40):  # each row once: in the printed answer, not also in a stale copy of the region
        assert len(re.findall(rf"row{n:02d}\b", screen)) == 1, (n, screen)
    assert "interrupts" not in screen  # no status line left either


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup.sh --tests installs it)")
@pytest.mark.parametrize("rows", [12, ROWS], ids=["shorter-and-narrower", "narrower"])
def test_a_terminal_that_rewraps_its_lines_keeps_no_stale_rows_either(calc_repo, tmp_path, rows):
    # tmux re-wraps every line when it gets narrower: a frame of the live region drawn 120 columns wide
    # takes two rows a line at 60, and moving up one row a line left halves of it behind (issue 49)
    with StubServer(["clover"]) as stub:
        stub.script += [sse([chunk({"content": line + "\n\n"}) for line in ROW_TEXT], pause=0.06)]
        tmux = ["tmux", "-L", f"clover-resize-{os.getpid()}", "-f", "/dev/null"]
        env = cli_env(PROMPT_TOOLKIT_NO_CPR="1", COLORFGBG="15;0", TERM="xterm")
        for name in ("COLUMNS", "LINES", "TMUX"):
            env.pop(name, None)

        def pane(*args: str) -> str:
            return subprocess.run([*tmux, *args], env=env, capture_output=True, text=True, timeout=30).stdout

        def wait_for(text: str, timeout: float = 60) -> str:
            deadline = time.monotonic() + timeout
            while text not in (shown := pane("capture-pane", "-p", "-J", "-S", "-", "-t", "t")):
                assert time.monotonic() < deadline, f"{text!r} never appeared:\n{shown}"
                time.sleep(0.1)
            return shown

        command = shlex.join([sys.executable, "-m", "clovercode", "--endpoint", stub.url, "--sandbox", "none"])
        subprocess.run([*tmux, "new-session", "-d", "-s", "t", "-x", "120", "-y", str(ROWS), "-c", str(calc_repo),
                        f"exec {command}"], env=env, check=True, timeout=30)
        try:
            pane("set-option", "-t", "t", "history-limit", "10000")
            wait_for(PROMPT)
            pane("send-keys", "-t", "t", "write forty rows", "Enter")
            wait_for("row12")
            pid = int(pane("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
            os.kill(pid, signal.SIGSTOP)  # every byte before the change drawn for the old width, after it the new
            time.sleep(0.3)
            pane("resize-window", "-t", "t", "-x", "60", "-y", str(rows))
            time.sleep(0.3)
            os.kill(pid, signal.SIGCONT)
            wait_for("row39")
            screen = wait_for(PROMPT + " ")  # the answer is printed and the prompt is back
            deadline = time.monotonic() + 30
            while screen.count(PROMPT) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
                screen = pane("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
        finally:
            subprocess.run([*tmux, "kill-server"], env=env, capture_output=True, timeout=30)
    for n in range(40):  # each row once: in the printed answer, not also in a stale copy of the region
        assert len(re.findall(rf"row{n:02d}\b", screen)) == 1, (n, screen)
    assert "interrupts" not in screen
