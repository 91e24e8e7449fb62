"""Branch names for fixes: ``clovercode/42-short-slug`` from an issue number and title (pure)."""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

SLUG_WORDS = 6
SLUG_CHARS = 40


def slugify(text: str, max_chars: int = SLUG_CHARS, max_words: int = SLUG_WORDS) -> str:
    """Lower-case ASCII words joined by '-', cut at a word boundary: 'Mean() is WRONG!' -> 'mean-is-wrong'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())[:max_words]
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_chars:
            break
        slug = candidate
    return slug or (words[0][:max_chars] if words else "")


def branch_name(prefix: str, title: str, number: int | None = None) -> str:
    """``prefix + '42-slug'`` for a numbered issue, ``prefix + 'slug'`` otherwise; never empty."""
    slug = slugify(title)
    if number is not None:
        stem = f"{number}-{slug}" if slug else str(number)
    else:
        stem = slug or "fix"
    return f"{prefix}{stem}"


def existing_issue_branch(prefix: str, number: int, names: Iterable[str]) -> str | None:
    """A branch already made for issue ``number`` (its title may have changed since): the first in sorted order."""
    pattern = re.compile(re.escape(f"{prefix}{number}") + r"(-|$)")
    matches = sorted(name for name in names if pattern.match(name))
    return matches[0] if matches else None


def valid_branch_name(name: str) -> bool:
    """The rules of ``git check-ref-format --branch`` that a user-given name can break."""
    if not name or name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")) or name == "@":
        return False
    if ".." in name or "//" in name or "@{" in name or "/." in name or name.startswith("."):
        return False
    return not any(ch in name for ch in " ~^:?*[\\\x7f") and all(ord(ch) >= 32 for ch in name)
