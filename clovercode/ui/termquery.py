"""Asking the terminal for its background colour (xterm's OSC 11), for ``ui.theme = auto`` where
COLORFGBG is not set (gnome-terminal, Apple's Terminal, VS Code, kitty, WezTerm, Windows Terminal).

The question is followed by a device-attributes query (DA1, ``ESC [ c``), which every VT100-style
terminal answers: its answer ends the wait at once, with or without a colour before it, so a
terminal that does not know OSC 11 costs one round trip, not the timeout. Only a terminal that
answers neither waits ``timeout`` seconds. Both ends must be the terminal (stdin and the output are
ttys); keys typed meanwhile are dropped with the answers."""

from __future__ import annotations

import os
import re
import select
import time

QUERY = b"\x1b]11;?\x1b\\" + b"\x1b[c"
COLOUR = re.compile(rb"\x1b\]11;rgb:([0-9a-fA-F]{1,4})/([0-9a-fA-F]{1,4})/([0-9a-fA-F]{1,4})")
ATTRIBUTES = re.compile(rb"\x1b\[\?[0-9;]*c")


def parse_background(answer: bytes) -> tuple[float, float, float] | None:
    """The background as (r, g, b) in 0..1 from a terminal's answer, or None when it has none."""
    found = COLOUR.search(answer)
    if found is None:
        return None
    return tuple(int(part, 16) / (16 ** len(part) - 1) for part in found.groups())  # type: ignore[return-value]


def is_light(rgb: tuple[float, float, float]) -> bool:
    """Light when the background's relative luminance (sRGB, as WCAG computes it) is above the middle."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18  # 0.18: the luminance of a mid grey (#777)


def query_background(fd_in: int, fd_out: int, timeout: float = 0.3) -> tuple[float, float, float] | None:
    """Ask the terminal on ``fd_in``/``fd_out``; None when either is not a terminal or nothing says."""
    try:
        import termios
        import tty
    except ImportError:  # pragma: no cover - Windows
        return None
    if not (os.isatty(fd_in) and os.isatty(fd_out)):
        return None
    try:
        saved = termios.tcgetattr(fd_in)
    except termios.error:
        return None
    answer = b""
    try:
        tty.setcbreak(fd_in, termios.TCSANOW)  # no echo of the answer, bytes as they come
        os.write(fd_out, QUERY)
        deadline = time.monotonic() + timeout
        while not ATTRIBUTES.search(answer) and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd_in], [], [], left)
            if not ready:
                break
            chunk = os.read(fd_in, 1024)
            if not chunk:
                break
            answer += chunk
    except OSError:
        return None
    finally:
        termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
    return parse_background(answer)
