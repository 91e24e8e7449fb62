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


def spawn_repl(repo: Path, *args: str, timeout: float = 60, cols: int = COLS, sized_by_env: bool = True,
               **env: str) -> pexpect.spawn:
    """The REPL on a pty of ROWS x ``cols``; ``sized_by_env`` also exports COLUMNS and LINES, which fix
    the size rich draws at (a shell does not export them: a test of resizing must not either)."""
    size = {"COLUMNS": str(cols), "LINES": str(ROWS)} if sized_by_env else {}
    # COLORFGBG names a dark background, as many terminals do: the REPL then asks pexpect's pty (which
    # never answers) nothing about its background. COLORFGBG="" makes it ask (tests/test_theme.py).
    env = {"COLORFGBG": "15;0", **env}
    environment = cli_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", **size, **env)
    for name in () if sized_by_env else ("COLUMNS", "LINES"):
        environment.pop(name, None)
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


def play(parts: list[tuple[str, tuple[int, int]]]) -> str:
    """Raw output played on a terminal resized between the parts (rows, columns each): the screen and
    its scrollback afterwards, as :func:`screen_text` gives them. A resize is xterm's, VTE's and tmux's:
    the cursor keeps its line, rows that no longer fit above it scroll into the scrollback, columns
    past the new width are cut (pyte's own resize drops the top rows and leaves the cursor behind)."""
    (first, (rows, cols)), *rest = parts
    screen = pyte.HistoryScreen(cols, rows, history=100000)
    stream = pyte.Stream(screen)
    stream.feed(first)
    for text, (rows, cols) in rest:
        over = screen.cursor.y - (rows - 1)
        if over > 0:
            y = screen.cursor.y
            screen.cursor.y = screen.lines - 1
            for _ in range(over):
                screen.index()  # at the bottom row: the top row goes to the scrollback
            screen.cursor.y = y - over
        for y in range(rows, screen.lines):
            screen.buffer.pop(y, None)
        for line in screen.buffer.values():
            for x in range(cols, screen.columns):
                line.pop(x, None)
        screen.lines, screen.columns = rows, cols
        screen.cursor.x = min(screen.cursor.x, cols - 1)
        screen.set_margins()
        screen.dirty.update(range(rows))
        stream.feed(text)
    kept = [("".join(line[x].data for x in range(screen.columns))).rstrip() for line in screen.history.top]
    kept += [line.rstrip() for line in screen.display]
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept)
