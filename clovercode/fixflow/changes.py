"""The change a fix commits, counted before the commit exists (the commit message lists it)."""

from __future__ import annotations

import stat

from clovercode.vcs.git import Checkout, FileStat


def pending_stats(checkout: Checkout, base: str, paths: list[str]) -> list[FileStat]:
    """Lines added and removed per file the commit will hold (tracked files against ``base``; a new file
    counts all its lines), for the commit message, which is written before the commit exists."""
    stats: dict[str, FileStat] = {}
    if paths:
        for record in checkout.git("diff", "--numstat", "--no-renames", "-z", base, "--", *paths).split("\0"):
            if record.strip():
                added, removed, path = record.split("\t", 2)
                stats[path] = FileStat(path, None if added == "-" else int(added), None if removed == "-" else int(removed))
    for path in paths:
        if path not in stats:  # new: untracked until the commit
            file = checkout.top / path
            try:  # a symbolic link or a FIFO the model made is never followed or opened
                data = file.read_bytes() if stat.S_ISREG(file.lstat().st_mode) else b"\0"
            except OSError:
                data = b""
            binary = b"\0" in data[:8000]
            stats[path] = FileStat(path, None if binary else len(data.splitlines()), None if binary else 0)
    return [stats[path] for path in sorted(stats)]
