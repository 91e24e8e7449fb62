"""Stat snapshots of the files git ignores, so a file a command wrote into an ignored directory (a
module in ``build/``, a package in ``.venv``) is seen like one the file tools wrote: git's own status
never lists it, and without it the commit can pass the tests only in the working tree.

A snapshot is taken at the start and around each test run (fixflow/changes.py); a path whose
(mode, size, mtime_ns, inode) differs between two snapshots, or that appeared or went, changed.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from clovercode.vcs.git import Checkout

Stamp = tuple[int, int, int, int]  # (mode, size, mtime_ns, inode)
Snapshot = Mapping[str, Stamp]  # top-relative path -> its stamp


def _stamp(info: os.stat_result) -> Stamp:
    return (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino)


def ignored_snapshot(checkout: "Checkout") -> dict[str, Stamp]:
    """Every ignored, untracked file of the working tree and its stamp (links are not followed; a
    nested repository's ``.git`` is not entered)."""
    # --directory: an ignored directory is one entry, walked here once instead of listed file by file
    out = checkout.git("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    top = str(checkout.top)
    found: dict[str, Stamp] = {}
    pending: list[str] = []
    for rel in out.split("\0"):
        if not rel:
            continue
        if rel.endswith("/"):
            pending.append(rel.rstrip("/"))
            continue
        try:
            found[rel] = _stamp(os.lstat(os.path.join(top, rel)))
        except OSError:
            continue
    while pending:  # iterative: a deep tree never reaches the recursion limit
        rel = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(top, rel)))
        except OSError:
            continue
        for entry in entries:
            if entry.name == ".git":
                continue
            sub = f"{rel}/{entry.name}"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(sub)
            else:
                found[sub] = _stamp(info)
    return found


def changed(before: Snapshot, after: Snapshot) -> set[str]:
    """Paths written, replaced, renamed, re-moded, created or deleted between two snapshots."""
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
