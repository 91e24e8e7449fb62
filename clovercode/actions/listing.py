"""Which files of the project the tools see: git's view (tracked + untracked-not-ignored) when the
project is a git repository, else a walk that skips the usual build, cache and vendor directories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from clovercode.trust import gitsafe

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
             ".pytest_cache", ".tox", "dist", "build", ".clovercode", "target", ".idea", ".ruff_cache"}


def project_files(root: Path, under: Path | None = None, *, skip_dirs: frozenset[str] | set[str] = SKIP_DIRS) -> list[Path]:
    """Sorted files (absolute paths) of the project below ``under`` (default: the root).

    ``skip_dirs`` prunes the walk used outside git repositories (the repo map skips more)."""
    root = root.resolve()
    under = (under or root).resolve()
    listed = _git_files(root)
    if listed is None:
        listed = _walk(root, skip_dirs)
    return sorted(p for p in listed if p == under or under in p.parents)


def _git_files(root: Path) -> list[Path] | None:
    try:
        out = gitsafe.run(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                          capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = []
    for name in out.decode("utf-8", errors="surrogateescape").split("\0"):
        if name:
            path = root / name
            if path.is_file():
                files.append(path)
    return files


def _walk(root: Path, skip_dirs: frozenset[str] | set[str]) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        files.extend(Path(dirpath) / f for f in filenames)
    return files
