"""Untrusted text made inert for a terminal, and pending keys discarded before a question.

A terminal obeys what it is sent: ESC/CSI sequences erase lines and move the cursor, OSC 8 makes
links and OSC 52 writes the clipboard, a carriage return or backspace overprints, bidi overrides
(U+202E) show text in an order other than the one that runs. Every string that came from outside
(the model's text, a command and its arguments, tool output, MCP results, file names) passes
:func:`inert` before it is drawn: each such character is written out as a visible escape
(``\\x1b``, ``\\r``, ``\\u202e``), so what a person reads is what the string holds, and the rest of a
sequence (``[2K``) shows as plain text. Ordinary text, emoji included, is kept as it is.

Ground floor: standard library only.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# Invisible or reordering code points (Unicode "format" characters, Cf), plus the line and paragraph
# separators. U+200D (zero width joiner) is kept: emoji sequences need it and it moves nothing.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b\u200c\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
# C0 controls (newline and tab handled apart), DEL, C1 controls (0x9b is an 8-bit CSI), and lone
# surrogates, which no terminal can be sent.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff"
_UNSAFE = re.compile(f"[{_CONTROLS}{_FORMAT}]")
_UNSAFE_OR_BREAK = re.compile(f"[{_CONTROLS}{_FORMAT}\n\t]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\a": "\\a", "\f": "\\f", "\v": "\\v"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def inert(text: str, *, newlines: bool = True) -> str:
    """``text`` with every character that could steer a terminal written out visibly.

    ``newlines=True`` keeps newline and tab (output, prose, diffs); ``False`` writes them out too,
    for what must show on one line (a name, a title, a prefix offered as a rule). Idempotent."""
    pattern = _UNSAFE if newlines else _UNSAFE_OR_BREAK
    if pattern.search(text) is None:  # the common case costs one scan
        return text
    return pattern.sub(_visible, text)


def discard_pending_input(stream: TextIO | None = None) -> bool:
    """Throw away keys typed before a question was shown (a ``y`` typed while the model was writing
    must not answer the approval that follows). Only for a terminal; returns whether it flushed."""
    stream = stream if stream is not None else sys.stdin
    try:
        if not stream.isatty():
            return False
        import termios

        termios.tcflush(stream.fileno(), termios.TCIFLUSH)
    except (OSError, ValueError, ImportError):  # closed, not a real file, or no termios (Windows)
        return False
    return True
