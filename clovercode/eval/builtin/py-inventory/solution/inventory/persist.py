"""Saving and loading a store as JSON: {"format": 1, "stock": {"SKU": quantity, ...}}."""

import json
from pathlib import Path

from inventory.store import Store

FORMAT = 1


def save(store: Store, path: Path) -> None:
    """Write the store to ``path`` (SKUs sorted, so files diff well)."""
    stock = {sku: store.quantity(sku) for sku in store.skus()}
    path.write_text(json.dumps({"format": FORMAT, "stock": stock}, indent=2) + "\n", encoding="utf-8")


def load(path: Path) -> Store:
    """Read a store written by ``save``; ValueError when the format number is not FORMAT."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported format {data.get('format')!r}")
    store = Store()
    for sku, count in data["stock"].items():
        store.add(sku, count)
    return store
