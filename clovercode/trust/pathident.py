"""Protected paths by identity, not spelling.

A name is the same file wherever the project is checked out: `.VSCode/tasks.json` *is*
`.vscode/tasks.json` on macOS (case-insensitive, NFD-normalising, and ignoring some invisible code
points) and on Windows (case-insensitive, trailing dots and spaces dropped), and a commit made on
Linux reaches those machines. So a protected entry is compared with a path through :func:`key`: the
canonical caseless form of Unicode (NFD, casefold, NFD again), without the code points HFS+ ignores,
each component without trailing dots and spaces. Entries may hold shell wildcards
(``.lintstagedrc*``), matched per component. docs/security.md, "Protected paths".
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat as statmod
import unicodedata
from typing import Iterable

# Code points HFS+ leaves out when it compares names (git's is_hfs_dotgit list): ZWNJ..RLM, the
# bidirectional embeddings, the deprecated format characters and the byte-order mark.
_IGNORED = re.compile("[\u200b-\u200f\u202a-\u202e\u206a-\u206f\ufeff\u00ad\u034f\u2060-\u2064]")


def key(name: str) -> str:
    """The form two names share when some checkout's file system takes them for one file."""
    text = _IGNORED.sub("", name)
    folded = unicodedata.normalize("NFD", unicodedata.normalize("NFD", text).casefold())
    return "/".join(_component(part) for part in folded.split("/"))


def _component(part: str) -> str:
    if part in (".", ".."):
        return part
    return part.rstrip(" .") or part  # NTFS drops trailing dots and spaces


def _parts(text: str) -> list[str]:
    return [part for part in key(text.strip("/")).split("/") if part not in ("", ".")]


def _match(names: list[str], patterns: list[str]) -> bool:
    return all(name == pattern or fnmatch.fnmatchcase(name, pattern) for name, pattern in zip(names, patterns))


def under(path: str, entry: str) -> bool:
    """Whether ``path`` is ``entry`` or lies below it (both relative to the same place, or both absolute)."""
    names, patterns = _parts(path), _parts(entry)
    return len(names) >= len(patterns) and _match(names, patterns)


def covers(path: str, entry: str) -> bool:
    """:func:`under`, or ``path`` is a directory above ``entry`` (replaced by a file or a link, it would
    carry the entry with it)."""
    names, patterns = _parts(path), _parts(entry)
    if len(names) >= len(patterns):
        return _match(names, patterns)
    return bool(names) and _match(names, patterns[:len(names)])


def first_covering(path: str, entries: Iterable[str]) -> str | None:
    """The first of ``entries`` that :func:`covers` ``path``, else None."""
    return next((entry for entry in entries if covers(path, entry)), None)


def on_disk(base: str, entry: str, limit: int = 256, cache: dict | None = None) -> list[str]:
    """The existing paths below ``base`` (a real directory) that name ``entry`` on some checkout: every
    spelling in any case or normal form, every name its wildcards match. Directories on the way are
    entered only when they are real directories (never a link), so nothing outside ``base`` is named;
    ``limit`` bounds what a hostile tree can make this list; ``cache`` keeps each directory's keyed
    listing across calls (one survey asks about many entries in the same few directories)."""
    cache = {} if cache is None else cache
    found = [base]
    patterns = _parts(entry)
    for depth, pattern in enumerate(patterns):
        last = depth == len(patterns) - 1
        nxt: list[str] = []
        magic = any(ch in pattern for ch in "*?[")
        for directory in found:
            keyed, index = _listing(directory, cache)
            # a literal entry is one lookup by key; only the few wildcard entries look at every name
            candidates = ([name for name, named in keyed if fnmatch.fnmatchcase(named, pattern)] if magic
                          else index.get(pattern, []))
            for name in candidates:
                if len(nxt) >= limit:
                    break
                path = os.path.join(directory, name)
                if not last:
                    try:
                        if not statmod.S_ISDIR(os.lstat(path).st_mode):
                            continue
                    except OSError:
                        continue
                nxt.append(path)
        found = nxt
        if not found:
            return []
    return found


def _listing(directory: str, cache: dict[str, tuple[list[tuple[str, str]], dict[str, list[str]]]],
             ) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """(each name with its key, names by key) of ``directory``, listed once per cache."""
    if directory not in cache:
        try:
            with os.scandir(directory) as entries:
                names = sorted(e.name for e in entries)
        except OSError:
            names = []
        keyed = [(name, _component(key(name))) for name in names]
        index: dict[str, list[str]] = {}
        for name, named in keyed:
            index.setdefault(named, []).append(name)
        cache[directory] = (keyed, index)
    return cache[directory]
