"""Resolve model-given paths inside the project root; refuse everything else."""

from __future__ import annotations

from pathlib import Path

from clovercode.actions.context import ToolError
from clovercode.trust.projectview import OutsideProject, ProjectView


def resolve_in_root(root: Path | ProjectView, given: str, *, must_exist: bool = False) -> Path:
    """``given`` as an absolute path beneath ``root`` (links followed only while they stay inside),
    or a ToolError."""
    text = given.strip()
    if not text:
        raise ToolError("The path is empty; give a path relative to the project root.")
    if "\x00" in text:
        raise ToolError("The path contains a NUL byte.")
    view = root if isinstance(root, ProjectView) else ProjectView(root)
    try:
        resolved = view.resolve(str(Path(text).expanduser()))  # the one containment rule (trust/projectview.py)
    except OutsideProject:
        raise ToolError(f"'{given}' is outside the project ({view.root}); only files inside it can be used.") from None
    if must_exist and view.kind(resolved) is None:
        raise ToolError(f"'{given}' does not exist. Use list_files or search_text to find the right path.")
    return resolved


def display(root: Path, path: Path) -> str:
    """A project-relative path for messages."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return str(path)
    return rel.as_posix() or "."
