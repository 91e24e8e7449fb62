"""Which files of the project the tools see: git's view (tracked + untracked-not-ignored) when the
project is a git repository, else a walk that skips the usual build, cache and vendor directories.
Either way through the project view: a listed name whose link leads outside the project is left out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clovercode.trust import gitsafe
from clovercode.trust.projectview import ProjectView

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
             ".pytest_cache", ".tox", "dist", "build", ".clovercode", "target", ".idea", ".ruff_cache"}


def project_files(root: Path | ProjectView, under: Path | None = None, *,
                  skip_dirs: frozenset[str] | set[str] = SKIP_DIRS) -> list[Path]:
    """Sorted files (absolute paths, as listed: a link inside the project keeps its own name) of
    the project below ``under`` (default: the root).

    ``skip_dirs`` prunes the walk used outside git repositories (the repo map skips more)."""
    view = root if isinstance(root, ProjectView) else ProjectView(root)
    top = view.root
    under = view.resolve(under) if under is not None else top
    listed = _git_files(view)
    if listed is None:
        listed = [top / rel for rel in view.walk(".", skip_dirs)]
    prefix = str(under).rstrip("/") + "/"
    return sorted(p for p in listed if p == under or str(p).startswith(prefix))


def _git_files(view: ProjectView) -> list[Path] | None:
    try:
        out = gitsafe.run(view.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                          capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [name for name in out.decode("utf-8", errors="surrogateescape").split("\0") if name]
    # absent, a directory, or a link leading out: not listed
    return [view.root / name for name in view.files_among(names)]
