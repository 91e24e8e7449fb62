"""Reports for the purchasing team."""

from decimal import Decimal

from inventory.store import Store


def low_stock(store: Store, threshold: int) -> list[tuple[str, int]]:
    """(sku, quantity) for every SKU with quantity below ``threshold``, lowest first, ties by SKU."""
    raise NotImplementedError


def stock_value(store: Store, prices: dict[str, Decimal]) -> Decimal:
    """Sum of quantity * price over the SKUs in stock; a SKU without a price is a KeyError."""
    raise NotImplementedError
