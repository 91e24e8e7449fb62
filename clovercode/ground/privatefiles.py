"""clovercode's own files are the user's alone: trajectories, REPL history, checkpoints, crash reports,
MCP server logs and tag caches hold other projects' code, tasks and command output. Directories are
made 0700 and files 0600 whatever the umask (``mkdir``/``open`` modes are masked by it; an explicit
chmod is not). Ground floor: standard library only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600
_FLAGS = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}


def private_dir(path: Path, own: bool = True) -> Path:
    """``mkdir -p path``; every directory this creates is 0700, and so is ``path`` itself when it is
    clovercode's own (``own``; not for a directory a user's setting merely points into)."""
    created = []
    here = Path(path)
    while not os.path.lexists(here) and here != here.parent:
        created.append(here)
        here = here.parent
    Path(path).mkdir(parents=True, exist_ok=True)
    for directory in [*created, *([Path(path)] if own else [])]:
        _chmod(directory, DIR_MODE)
    return Path(path)


def open_private(path: Path, mode: str = "a") -> IO[str]:
    """A text file opened for appending ("a") or rewriting ("w"), 0600 even if it existed wider."""
    fd = os.open(path, _FLAGS[mode] | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path, text: str) -> None:
    with open_private(path, "w") as handle:
        handle.write(text)


def make_private(path: Path) -> None:
    """A file some library created (SQLite's database) made 0600."""
    _chmod(path, FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except OSError:  # not ours (another user's shared directory): leave it, the files inside are still 0600
        pass
