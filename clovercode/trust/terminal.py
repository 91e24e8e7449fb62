"""Untrusted text made inert for a terminal, and pending keys discarded before a question.

A terminal obeys what it is sent: ESC/CSI sequences erase lines and move the cursor, OSC 8 makes
links and OSC 52 writes the clipboard, a carriage return or backspace overprints, bidi overrides
(U+202E) show text in an order other than the one that runs. Every string that came from outside
(the model's text, a command and its arguments, tool output, MCP results, file names) passes
:func:`inert` before it is drawn, which admits by an allowlist: printable ASCII, newline and tab,
and the characters Unicode says draw something (letters, marks, digits, punctuation, symbols, the
spaces that draw a blank, the emoji joiners). Every other character is written out as a visible escape
(``\\x1b``, ``\\r``, ``\\u202e``), so what a person reads is what the string holds, and the rest of a
sequence (``[2K``) shows as plain text. Ordinary text, emoji included, is kept as it is.

The approval screen is stricter (:func:`reveal`, :func:`revealed`): what a person approves must show
every character that will run, so there only an allowlist of characters shows as itself (printable
ASCII, and the letters, marks, digits, punctuation and symbols that draw something) and everything
else is written out as ``\\u{E0100}``, never as a blank, a zero-width nothing or a variation of the
character before it.

Ground floor: standard library only.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from typing import TextIO

# Prose is passed by an allowlist: printable ASCII (and newline, tab) costs one scan; any other
# character shows as itself only when it is known to draw something (``_prose_kind``), and everything
# else — controls, format characters, unassigned and private-use code points, default-ignorable
# fillers, line separators — is written out. Listing what is bad missed characters before (variation
# selectors, Hangul fillers); what a future Unicode adds is refused by default.
_PLAIN = re.compile(r"[\x20-\x7e\n\t]*")
_PLAIN_LINE = re.compile(r"[\x20-\x7e]*")
# Emoji need these three, and none moves or hides text: the zero width joiner (family and profession
# sequences) and the text/emoji presentation selectors.
_EMOJI_JOINERS = frozenset("\u200d\ufe0e\ufe0f")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\a": "\\a", "\f": "\\f", "\v": "\\v"}


def _visible(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@functools.lru_cache(maxsize=8192)
def _prose_kind(char: str) -> bool:
    """Whether prose may draw ``char`` as itself: what the approval screen shows, the emoji joiners,
    and the spaces (Zs) that draw a blank of their own width (no-break, ideographic)."""
    if char in _EMOJI_JOINERS:
        return True
    if _kind(char):
        return True
    return unicodedata.category(char) == "Zs" and not _hidden(ord(char))


def inert(text: str, *, newlines: bool = True) -> str:
    """``text`` with every character not known to draw safely written out visibly.

    ``newlines=True`` keeps newline and tab (output, prose, diffs); ``False`` writes them out too,
    for what must show on one line (a name, a title, a prefix offered as a rule). Idempotent."""
    if (_PLAIN if newlines else _PLAIN_LINE).fullmatch(text):  # the common case costs one scan
        return text
    kept = "\n\t" if newlines else ""
    return "".join(char if char in kept or ("\x20" <= char < "\x7f") or _prose_kind(char) else _visible(char)
                   for char in text)


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


# --- the approval screen's allowlist -------------------------------------------------------------
# Unicode general categories whose characters draw something of their own. Not listed, so escaped:
# Cc controls, Cf format (bidi, zero-width, tags), Co private use, Cs surrogates, Cn unassigned,
# Zs spaces other than U+0020 (no-break, en/em, ideographic U+3000), Zl/Zp line/paragraph separators.
_SHOWN = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
                    "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"})
# Inside those categories, what renders as nothing: Unicode's Default_Ignorable_Code_Point set
# (DerivedCoreProperties.txt), which holds the variation selectors (U+FE00-FE0F, U+E0100-E01EF),
# the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), the combining grapheme joiner and the
# Mongolian selectors; plus two letters that draw a blank by design (U+2800 braille pattern blank,
# U+16FE4 Khitan filler).
_HIDDEN_RANGES = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                  (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800),
                  (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
                  (0x16FE4, 0x16FE4), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
MAX_MARKS = 4  # combining marks on one base: enough for Vietnamese, Hebrew, Tibetan; more is a stack
_PLAIN_ASCII = re.compile(r"[\x20-\x7e]*")
Piece = tuple[str, bool]  # (what is drawn, whether it is an escape standing for one character)


def _hidden(code: int) -> bool:
    return any(low <= code <= high for low, high in _HIDDEN_RANGES)


@functools.lru_cache(maxsize=8192)
def _kind(char: str) -> str:
    """"base" (shows, and marks may sit on it), "mark" (shows on a base), or "" (escaped)."""
    code = ord(char)
    if 0x20 <= code < 0x7f:
        return "base"
    if _hidden(code):
        return ""
    category = unicodedata.category(char)
    if category not in _SHOWN:
        return ""
    return "mark" if category[0] == "M" else "base"


def escape(char: str) -> str:
    """One character as the screen writes it out: ``\\u{E0100}``, ``\\u{9}`` for a tab."""
    return f"\\u{{{ord(char):X}}}"


def shows_as_itself(char: str) -> bool:
    """Whether the approval screen may draw ``char`` as itself (alone; a mark also needs a base)."""
    return _kind(char) != ""


def reveal(line: str) -> list[Piece]:
    """``line`` (a newline is escaped too) as pieces: runs shown as themselves, and one escape per
    character outside the allowlist. A combining mark shows only on a shown base and at most
    :data:`MAX_MARKS` deep; a backslash that would start ``\\u{`` is escaped too, so the text
    form (:func:`revealed`) reads back unambiguously."""
    if _PLAIN_ASCII.fullmatch(line) and "\\u{" not in line:  # the common case costs one scan
        return [(line, False)] if line else []
    pieces: list[Piece] = []
    run: list[str] = []
    marks = -1  # marks on the current base; -1: no shown base to sit on
    for at, char in enumerate(line):
        kind = _kind(char)
        if kind == "mark" and 0 <= marks < MAX_MARKS:
            marks += 1
        elif kind == "base" and not (char == "\\" and line.startswith("u{", at + 1)):
            marks = 0
        else:
            if run:
                pieces.append(("".join(run), False))
                run = []
            pieces.append((escape(char), True))
            marks = -1
            continue
        run.append(char)
    if run:
        pieces.append(("".join(run), False))
    return pieces


def revealed(text: str, *, newlines: bool = True) -> str:
    """:func:`reveal` as one string, line by line; ``newlines=False`` writes newlines out too."""
    lines = text.split("\n") if newlines else [text]
    return "\n".join("".join(piece for piece, _ in reveal(line)) for line in lines)


def escaped_count(pieces: "list[Piece] | tuple[Piece, ...]") -> int:
    """How many characters the pieces write out, not counting tabs and guarded backslashes (those
    are marked, but hide nothing)."""
    return sum(1 for piece, marked in pieces if marked and piece.startswith("\\u{") and piece not in ("\\u{9}", "\\u{5C}"))


def hex_dump(text: str, width: int = 16) -> list[str]:
    """``text``'s UTF-8 bytes as hex rows with their offset, for the approval's raw view."""
    data = text.encode("utf-8", "surrogatepass")
    return [f"{at:06x}  {data[at:at + width].hex(' ')}" for at in range(0, len(data), width)]
