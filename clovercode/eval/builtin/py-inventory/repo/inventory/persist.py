"""Saving and loading a store as JSON: {"format": 1, "stock": {"SKU": quantity, ...}}."""

import json
from pathlib import Path

from inventory.store import Store

FORMAT = 1


def save(store: Store, path: Path) -> None:
    """Write the store to ``path`` (SKUs sorted, so files diff well)."""
    raise NotImplementedError


def load(path: Path) -> Store:
    """Read a store written by ``save``; ValueError when the format number is not FORMAT."""
    raise NotImplementedError
