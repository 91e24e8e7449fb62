"""One key answers a question, no Enter (as Claude Code and Codex ask): the terminal in cbreak mode
without echo for the length of the question, keys typed before it was shown thrown away.

Esc and Ctrl-D answer None; an arrow key or another escape sequence is not Esc (a lone ESC is one
no other byte follows within :data:`clovercode.ui.keys.ESC_TIMEOUT`); keys outside the choices
are ignored with a bell. Ctrl-C stays a signal (ISIG is kept). Ground floor: standard library only.
"""

from __future__ import annotations

import os
import select
import sys
from typing import TextIO

from clovercode.ui.keys import ESC, ESC_TIMEOUT

CTRL_D = 0x04


def read_key(question: str, keys: str, *, fd: int | None = None, out: TextIO | None = None) -> str | None:
    """Write ``question``; return the first key pressed that is in ``keys`` (lower case), or None
    for Esc / Ctrl-D / the end of input. The key is echoed after the question."""
    import termios

    fd = sys.stdin.fileno() if fd is None else fd
    out = sys.stdout if out is None else out
    out.write(question)
    out.flush()
    saved = termios.tcgetattr(fd)
    quiet = termios.tcgetattr(fd)
    quiet[3] &= ~(termios.ECHO | termios.ICANON)
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSAFLUSH, quiet)  # TCSAFLUSH: keys typed before the question are dropped
    try:
        while True:
            data = os.read(fd, 1)
            if not data or data[0] == CTRL_D:
                answer = None
                break
            if data[0] == ESC:
                if select.select([fd], [], [], ESC_TIMEOUT)[0]:
                    os.read(fd, 64)  # the rest of an arrow key's sequence: not an answer
                    continue
                answer = None
                break
            key = data.decode("latin-1").lower()
            if key in keys and key.isprintable() and key.strip():
                answer = key
                break
            out.write("\a")
            out.flush()
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
    out.write((answer or "") + "\n")
    out.flush()
    return answer
