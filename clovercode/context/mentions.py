"""Which project files and defined identifiers a piece of text (a task, a conversation) mentions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

_WORDS = re.compile(r"[\w][\w./\\-]*")
_IDENT = re.compile(r"[A-Za-z_]\w*")
MAX_SUFFIX_MATCHES = 3  # "utils.py" in a tree with a dozen of them points nowhere in particular
MIN_IDENT_CHARS = 3


@dataclass
class Mentions:
    files: set[str] = field(default_factory=set)
    idents: set[str] = field(default_factory=set)


def find_mentions(texts: Iterable[str], paths: Iterable[str], defined: set[str]) -> Mentions:
    """Files among ``paths`` (project-relative) and names among ``defined`` that ``texts`` mention.

    A file is mentioned by its path or a path suffix of whole components (``agent/loop.py``,
    ``loop.py``) that names at most a few files."""
    by_suffix: dict[str, list[str]] = {}
    for rel in paths:
        parts = rel.split("/")
        for start in range(len(parts)):
            by_suffix.setdefault("/".join(parts[start:]), []).append(rel)
    found = Mentions()
    for text in texts:
        for word in _WORDS.findall(text):
            word = word.rstrip(".-/\\").replace("\\", "/")
            if word.startswith("./"):
                word = word[2:]
            matches = by_suffix.get(word, ()) if "." in word else ()
            if 0 < len(matches) <= MAX_SUFFIX_MATCHES:
                found.files.update(matches)
            for ident in _IDENT.findall(word):
                if len(ident) >= MIN_IDENT_CHARS and ident in defined:
                    found.idents.add(ident)
    return found
