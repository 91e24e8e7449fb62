"""A real pseudo-terminal for REPL tests, and what a person would see on it: the raw output is fed to
pyte (a VT100 emulator), so redrawn or erased text (the live status region) counts as it ends up on
screen, scrollback included."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pexpect
import pyte

from conftest import cli_env, default_sigint

PROMPT = "clover>"
ROWS, COLS = 40, 120


def spawn_repl(repo: Path, *args: str, timeout: float = 60, cols: int = COLS, **env: str) -> pexpect.spawn:
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", COLUMNS=str(cols), LINES=str(ROWS), **env)
    child = pexpect.spawn(sys.executable, ["-m", "clovercode", *args], cwd=str(repo), env=environment,
                          encoding="utf-8", timeout=timeout, dimensions=(ROWS, cols), preexec_fn=default_sigint)
    child.logfile_read = io.StringIO()
    child.screen_cols = cols  # the screen is read after the child exits too, when its pty is gone
    return child


def screen_text(child: pexpect.spawn) -> str:
    """Everything on the screen and in its scrollback now, one string, trailing blanks stripped."""
    cols = getattr(child, "screen_cols", COLS)
    screen = pyte.HistoryScreen(cols, ROWS, history=100000)
    pyte.Stream(screen).feed(child.logfile_read.getvalue())
    rows = [("".join(line[x].data for x in range(cols))).rstrip() for line in screen.history.top]
    rows += [line.rstrip() for line in screen.display]
    while rows and not rows[-1]:
        rows.pop()
    return "\n".join(rows)


def wait_screen(child: pexpect.spawn, text: str, timeout: float = 60) -> None:
    """Wait until ``text`` is on the emulated screen (for redraws that never write it in one piece)."""
    import time

    deadline = time.monotonic() + timeout
    while text not in screen_text(child):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared on the screen:\n{screen_text(child)}")
        try:
            child.read_nonblocking(size=65536, timeout=0.2)
        except pexpect.TIMEOUT:
            pass
