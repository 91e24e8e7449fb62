"""Keep the user's ``__pycache__`` honest when clovercode changes Python sources.

Python trusts a ``.pyc`` whose recorded source mtime (whole seconds) and size match the source, so
an edit that keeps the size and lands in the same second as the compile is invisible to it. The
commands clovercode runs never read or write ``__pycache__`` (executors/pyenv.py); what is left is
the user's own bytecode from their earlier runs, which must not go stale under them: the pyc of a
source clovercode changed is removed (Python recompiles it on the next import). Only ``.pyc``
files go; a ``__pycache__`` directory the user had stays.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from clovercode.trust.projectview import ProjectView

SOURCE_SUFFIXES = (".py", ".pyw")
SKIP_DIRS = {".git", "node_modules", ".hg", ".svn", "site-packages"}  # installed code: not the project's sources
MAX_DIRS = 20000  # a tree bigger than this is not surveyed for bytecode (commands' edits then go unchecked)


def pyc_files(view: ProjectView, source: Path | str) -> list[str]:
    """The ``__pycache__`` bytecode files (project-relative) Python would load for ``source`` (any
    interpreter, any -O level). A ``__pycache__`` that is a link out of the project has none: the
    view refuses to list it, so nothing outside is ever deleted."""
    source = Path(source)
    if source.suffix not in SOURCE_SUFFIXES:
        return []
    pattern = re.compile(re.escape(source.stem) + r"\.[^.]+(\.opt-[^.]*)?\.pyc")
    try:
        cache = view.rel(source.parent / "__pycache__")
        return [f"{cache}/{name}" for name, kind in view.listdir(cache) if kind == "file" and pattern.fullmatch(name)]
    except OSError:
        return []


def invalidate(view: ProjectView, sources: Iterable[Path | str]) -> list[str]:
    """Remove the bytecode of ``sources``; returns what was removed (project-relative)."""
    removed = []
    for source in sources:
        for pyc in pyc_files(view, source):
            try:
                view.delete(pyc)
                removed.append(pyc)
            except OSError:
                pass
    return removed


class BytecodeGuard:
    """Removes the user's bytecode of the sources changed under ``root``: by the file tools at once
    (:meth:`changed`), by commands after each command (:meth:`after_command`: sources that had
    bytecode when the first command ran and whose mtime or size moved since)."""

    def __init__(self, root: Path, view: ProjectView | None = None):
        self.root = Path(root)
        self.view = view or ProjectView(root)
        self._stats: dict[str, tuple[int, int]] | None = None

    def changed(self, paths: Iterable[Path]) -> None:
        rels = []
        for path in paths:
            try:
                rels.append(self.view.rel(path))
            except OSError:
                continue
        invalidate(self.view, rels)
        if self._stats is not None:
            for rel in rels:
                self._stats.pop(rel, None)

    def before_command(self) -> None:
        if self._stats is None:
            self._stats = {source: stat for source in self._compiled_sources() if (stat := self._stat(source))}

    def after_command(self) -> None:
        if self._stats is None:
            return
        for source, seen in list(self._stats.items()):
            now = self._stat(source)
            if now != seen:
                invalidate(self.view, [source])
                del self._stats[source]

    def _compiled_sources(self) -> list[str]:
        """Sources under ``root`` (project-relative) that have a ``__pycache__`` entry now."""
        by_dir: dict[str, list[str]] = {}
        for rel in self.view.walk(".", SKIP_DIRS, max_dirs=MAX_DIRS):
            directory, _, name = rel.rpartition("/")
            by_dir.setdefault(directory, []).append(name)
        sources = []
        for directory, names in by_dir.items():
            if directory.rpartition("/")[2] != "__pycache__":
                continue
            parent = directory.rpartition("/")[0]
            cached = {_pyc_stem(name) for name in names if name.endswith(".pyc")}
            sources += [f"{parent}/{f}" if parent else f for f in by_dir.get(parent, [])
                        if f.endswith(SOURCE_SUFFIXES) and f.rsplit(".", 1)[0] in cached]
        return sources

    def _stat(self, rel: str) -> tuple[int, int] | None:
        try:
            st = self.view.stat(rel)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size


def _pyc_stem(name: str) -> str:
    """'mod.cpython-311.opt-1.pyc' -> 'mod' (the source's name without its suffix)."""
    base = re.sub(r"(\.opt-[^.]*)?\.pyc$", "", name)
    return base.rsplit(".", 1)[0]
