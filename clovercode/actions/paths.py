"""Resolve model-given paths inside the project root; refuse everything else."""

from __future__ import annotations

from pathlib import Path

from clovercode.actions.context import ToolError
from clovercode.trust.paths import inside_project


def resolve_in_root(root: Path, given: str, *, must_exist: bool = False) -> Path:
    """``given`` as an absolute path inside ``root`` (symlinks resolved), or a ToolError."""
    text = given.strip()
    if not text:
        raise ToolError("The path is empty; give a path relative to the project root.")
    if "\x00" in text:
        raise ToolError("The path contains a NUL byte.")
    root = root.resolve()
    resolved = inside_project(root, Path(text).expanduser())  # the one containment rule (trust/paths.py)
    if resolved is None:
        raise ToolError(f"'{given}' is outside the project ({root}); only files inside it can be used.")
    if must_exist and not resolved.exists():
        raise ToolError(f"'{given}' does not exist. Use list_files or search_text to find the right path.")
    return resolved


def display(root: Path, path: Path) -> str:
    """A project-relative path for messages."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return str(path)
    return rel.as_posix() or "."
