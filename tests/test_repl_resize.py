"""Resizing the terminal while the model streams (issue 38): nothing of the live region is left behind,
on the screen or in its scrollback, whether the terminal got narrower, shorter or both.

The screen is pyte's, resized the way xterm, VTE and tmux do it: the cursor keeps its line, rows that
no longer fit above it scroll into the scrollback, columns past the new width are cut. (pyte's own
resize drops the top rows and leaves the cursor where it was, which no terminal in use does.)"""

from __future__ import annotations

import re
import signal

import pexpect
import pytest

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
