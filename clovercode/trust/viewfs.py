"""Small helpers of the project view (trust/projectview.py): which secret patterns can apply under a
root, the temp files a killed writer left, whether a process lives, the umask."""

from __future__ import annotations

import fnmatch
import os
import re
import stat as statmod

TEMP_SUFFIX = ".clovercode-tmp"


def relevant(patterns: tuple[str, ...], root: str) -> "re.Pattern[str] | None":
    """One regular expression of the patterns that can match the root, a directory above it, or a
    path beneath it (judged by each pattern's part before its first wildcard); None when none can:
    a project under ~/src is then never slowed by the ~/.ssh rules while walking."""
    kept = []
    for pattern in patterns:
        cut = min((i for i, ch in enumerate(pattern) if ch in "*?["), default=len(pattern))
        literal = pattern[:cut]
        if root.startswith(literal) or literal.startswith(root.rstrip("/") + "/") or \
                (root + "/").startswith(literal):
            kept.append(fnmatch.translate(pattern))
    return re.compile("|".join(f"(?:{k})" for k in kept)) if kept else None


def is_link(name: str, dir_fd: int) -> bool:
    try:
        return statmod.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def remove_stale_temps(dfd: int, name: str) -> None:
    """Delete temp files of ``name`` left by a writer that was killed mid-write."""
    prefix = f".{name}."
    for leftover in os.listdir(dfd):
        if not (leftover.startswith(prefix) and leftover.endswith(TEMP_SUFFIX)):
            continue
        pid = leftover[len(prefix):].split(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.unlink(leftover, dir_fd=dfd)
            except OSError:
                pass


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (a temp file's writer)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def current_umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
