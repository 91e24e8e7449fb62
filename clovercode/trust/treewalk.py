"""Walk a directory tree beneath a root without recursion and without following links.

A sandboxed command can make a tree 1,100 levels deep in a second; a recursive walk (``os.walk`` on
Python 3.11, a generator calling itself) then dies of RecursionError, and one descriptor held per
level runs out of descriptors. This walk keeps a stack of paths instead: each directory is opened
from the root by its relative path and accepted only when it is the very directory listed in its
parent (same device and inode), so a component swapped for a link meanwhile is skipped, never
followed out. Depth is unbounded; the number of directories is bounded by the caller, with a clear
error past it. docs/security.md, "The project view".
"""

from __future__ import annotations

import errno
import os
import stat as statmod
from typing import Callable, Iterator

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DIRS = 200_000  # directories one walk enters unless the caller says otherwise


class TreeTooLarge(OSError):
    """More directories than a walk may enter."""

    def __init__(self, where: str, limit: int):
        super().__init__(errno.EFBIG, f"holds more than {limit:,} directories; clovercode walks no further", where)
        self.limit = limit


def iter_tree(root: str, start: list[str], *, skip: frozenset[str] = frozenset(), max_dirs: int | None = None,
              quiet: bool = False, prune: Callable[[list[str], str], bool] | None = None,
              ) -> Iterator[tuple[list[str], str, str]]:
    """(the directory's parts, name, kind) of every entry below ``start`` that is not a directory
    entered: kind 'file', 'link' or 'other'; depth first, sorted per directory. ``skip``: directory
    names not entered; ``prune(parts, name)``: entries left out altogether (secrets); past
    ``max_dirs`` directories (default :data:`MAX_DIRS`) :class:`TreeTooLarge`, or with ``quiet`` the
    walk just ends."""
    limit = MAX_DIRS if max_dirs is None else max_dirs
    stack: list[tuple[list[str], tuple[int, int] | None]] = [(start, None)]
    entered = 0
    while stack:
        parts, ident = stack.pop()
        if entered >= limit:
            if quiet:
                return
            raise TreeTooLarge("/".join(start) or ".", limit)
        entered += 1
        fd = _open(root, parts, ident)
        if fd is None:
            continue
        found: list[tuple[list[str], str, str]] = []
        below: list[tuple[list[str], tuple[int, int]]] = []
        try:
            with os.scandir(fd) as listing:
                entries = sorted((e.name, entry_kind(e)) for e in listing)
            for name, kind in entries:
                if prune is not None and prune(parts, name):
                    continue
                if kind != "dir":
                    found.append((parts, name, kind))
                    continue
                if name in skip:
                    continue
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if statmod.S_ISDIR(info.st_mode):
                    below.append(([*parts, name], (info.st_dev, info.st_ino)))
        except OSError:
            continue
        finally:
            os.close(fd)
        yield from found
        stack.extend(reversed(below))


def _open(root: str, parts: list[str], ident: tuple[int, int] | None) -> int | None:
    """A descriptor of ``root/parts`` when it is the directory ``ident`` names (None: the start,
    opened one component at a time without following any link); None when it is not there."""
    try:
        rfd = os.open(root, _DIR)
    except OSError:
        return None
    try:
        if ident is not None and parts:
            try:
                fd = os.open("/".join(parts), _DIR, dir_fd=rfd)
            except OSError as exc:
                if exc.errno != errno.ENAMETOOLONG:
                    return None
                fd = _open_each(rfd, parts)
        else:
            fd = _open_each(rfd, parts)
        if fd is None:
            return None
        if ident is not None:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != ident:  # a component became a link since it was listed
                os.close(fd)
                return None
        return fd
    finally:
        os.close(rfd)


def _open_each(rfd: int, parts: list[str]) -> int | None:
    fd = os.dup(rfd)
    for name in parts:
        try:
            nfd = os.open(name, _DIR, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nfd
    return fd


def entry_kind(entry: os.DirEntry) -> str:
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_file(follow_symlinks=False):
            return "file"
        return "dir" if entry.is_dir(follow_symlinks=False) else "other"
    except OSError:
        return "other"


def remove_tree(root: str, parts: list[str], max_dirs: int = MAX_DIRS) -> None:
    """Delete the directory ``root/parts`` and everything in it, at any depth, never through a link
    (``shutil.rmtree`` recurses, and dies of RecursionError on a deep tree a command made).
    :class:`TreeTooLarge` past ``max_dirs`` directories; other errors leave what could not go."""
    if not parts:
        raise OSError(errno.EBUSY, "is the root", root)
    rfd = os.open(root, _DIR)
    try:
        pfd = _open_each(rfd, parts[:-1])
    finally:
        os.close(rfd)
    if pfd is None:
        return
    try:
        top = os.stat(parts[-1], dir_fd=pfd, follow_symlinks=False)
        parent = os.fstat(pfd)
    finally:
        os.close(pfd)
    if not statmod.S_ISDIR(top.st_mode):
        return
    stack = [(parts, (top.st_dev, top.st_ino), (parent.st_dev, parent.st_ino))]
    emptied: list[tuple[list[str], tuple[int, int]]] = []  # (directory, its parent's identity), parents first
    while stack:
        if len(emptied) >= max_dirs:
            raise TreeTooLarge("/".join(parts), max_dirs)
        here, ident, above = stack.pop()
        fd = _open(root, here, ident)
        if fd is None:
            continue
        try:
            with os.scandir(fd) as listing:
                names = [(e.name, entry_kind(e)) for e in listing]
            for name, kind in names:
                if kind == "dir":
                    try:
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    stack.append(([*here, name], (info.st_dev, info.st_ino), ident))
                else:
                    try:
                        os.unlink(name, dir_fd=fd)
                    except OSError:
                        pass
        finally:
            os.close(fd)
        emptied.append((here, above))
    for here, above in reversed(emptied):  # children before their parents
        pfd = _open(root, here[:-1], above) if here[:-1] else os.open(root, _DIR)
        if pfd is None:
            continue
        try:
            os.rmdir(here[-1], dir_fd=pfd)
        except OSError:
            pass
        finally:
            os.close(pfd)
