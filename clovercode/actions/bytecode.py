"""Keep the user's ``__pycache__`` honest when clovercode changes Python sources.

Python trusts a ``.pyc`` whose recorded source mtime (whole seconds) and size match the source, so
an edit that keeps the size and lands in the same second as the compile is invisible to it. The
commands clovercode runs never read or write ``__pycache__`` (executors/pyenv.py); what is left is
the user's own bytecode from their earlier runs, which must not go stale under them: the pyc of a
source clovercode changed is removed (Python recompiles it on the next import). Only ``.pyc``
files go; a ``__pycache__`` directory the user had stays.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

SOURCE_SUFFIXES = (".py", ".pyw")
SKIP_DIRS = {".git", "node_modules", ".hg", ".svn", "site-packages"}  # installed code: not the project's sources
MAX_DIRS = 20000  # a tree bigger than this is not surveyed for bytecode (commands' edits then go unchecked)


def pyc_files(source: Path) -> list[Path]:
    """The ``__pycache__`` bytecode files Python would load for ``source`` (any interpreter, any -O level)."""
    if source.suffix not in SOURCE_SUFFIXES:
        return []
    cache = source.parent / "__pycache__"
    pattern = re.compile(re.escape(source.stem) + r"\.[^.]+(\.opt-[^.]*)?\.pyc")
    try:
        return [cache / name for name in os.listdir(cache) if pattern.fullmatch(name)]
    except OSError:
        return []


def invalidate(sources: Iterable[Path]) -> list[Path]:
    """Remove the bytecode of ``sources``; returns what was removed."""
    removed = []
    for source in sources:
        for pyc in pyc_files(source):
            try:
                pyc.unlink()
                removed.append(pyc)
            except OSError:
                pass
    return removed


class BytecodeGuard:
    """Removes the user's bytecode of the sources changed under ``root``: by the file tools at once
    (:meth:`changed`), by commands after each command (:meth:`after_command`: sources that had
    bytecode when the first command ran and whose mtime or size moved since)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._stats: dict[Path, tuple[int, int]] | None = None

    def changed(self, paths: Iterable[Path]) -> None:
        paths = list(paths)
        invalidate(paths)
        if self._stats is not None:
            for path in paths:
                self._stats.pop(path, None)

    def before_command(self) -> None:
        if self._stats is None:
            self._stats = {source: stat for source in self._compiled_sources() if (stat := _stat(source))}

    def after_command(self) -> None:
        if self._stats is None:
            return
        for source, seen in list(self._stats.items()):
            now = _stat(source)
            if now != seen:
                invalidate([source])
                del self._stats[source]

    def _compiled_sources(self) -> list[Path]:
        """Sources under ``root`` that have a ``__pycache__`` entry now."""
        sources, dirs = [], 0
        for top, names, files in os.walk(self.root):
            dirs += 1
            if dirs > MAX_DIRS:
                break
            names[:] = [n for n in names if n not in SKIP_DIRS]
            if "__pycache__" not in names:
                continue
            cached = {_pyc_stem(name) for name in _listdir(Path(top) / "__pycache__") if name.endswith(".pyc")}
            sources += [Path(top) / f for f in files if f.endswith(SOURCE_SUFFIXES) and f.rsplit(".", 1)[0] in cached]
        return sources


def _pyc_stem(name: str) -> str:
    """'mod.cpython-311.opt-1.pyc' -> 'mod' (the source's name without its suffix)."""
    base = re.sub(r"(\.opt-[^.]*)?\.pyc$", "", name)
    return base.rsplit(".", 1)[0]


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
