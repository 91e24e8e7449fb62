"""Where the shipped data lives: ``tools/`` and ``sandbox/`` (in the wheel under clovercode/_data)."""

from __future__ import annotations

from pathlib import Path


def data_dir(name: str) -> Path:
    """The directory of shipped data ``name`` ("tools", "sandbox", ...), installed or from a checkout."""
    package = Path(__file__).resolve().parent
    while (package.parent / "__init__.py").is_file():  # the top package, wherever in it this module sits
        package = package.parent
    for candidate in (package / "_data" / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"clovercode data directory '{name}' is missing from this installation")
