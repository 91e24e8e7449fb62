"""Text fitted to what the output can show: where its encoding (a Latin-1 or ASCII locale) lacks a
character, the marks clovercode draws fall back to ASCII (✓ → +, → → ->, … → ...) and anything
else becomes "?", so a locale never turns output into a crash. Ground floor: standard library only."""

from __future__ import annotations

import codecs

FALLBACK = {"✓": "+", "✗": "x", "→": "->", "⚠": "!", "■": "#", "↳": "->", "↪": ">", "↑": "^", "○": "o", "▸": ">",
            "…": "...", "—": "--", "–": "-", "·": "-", "─": "-", "━": "-", "│": "|", "•": "*", "⏎": "Enter",
            "‘": "'", "’": "'", "“": '"', "”": '"'}


def is_unicode(encoding: str | None) -> bool:
    try:
        return codecs.lookup(encoding or "utf-8").name.startswith("utf")
    except LookupError:
        return False


def fit(text: str, encoding: str | None) -> str:
    """``text`` as ``encoding`` can carry it (unchanged when it can)."""
    encoding = encoding or "utf-8"
    try:
        text.encode(encoding)
        return text
    except UnicodeEncodeError:
        pass
    except LookupError:
        encoding = "ascii"
    out = []
    for char in text:
        try:
            char.encode(encoding)
            out.append(char)
        except UnicodeEncodeError:
            spare = FALLBACK.get(char, "?")
            out.append(spare if _encodes(spare, encoding) else "?")
    return "".join(out)


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
        return True
    except UnicodeEncodeError:
        return False
