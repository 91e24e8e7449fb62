"""Reports for the purchasing team."""

from decimal import Decimal

from inventory.store import Store


def low_stock(store: Store, threshold: int) -> list[tuple[str, int]]:
    """(sku, quantity) for every SKU with quantity below ``threshold``, lowest first, ties by SKU."""
    rows = [(sku, store.quantity(sku)) for sku in store.skus()]
    return sorted(((s, q) for s, q in rows if q < threshold), key=lambda row: (row[1], row[0]))


def stock_value(store: Store, prices: dict[str, Decimal]) -> Decimal:
    """Sum of quantity * price over the SKUs in stock; a SKU without a price is a KeyError."""
    return sum((prices[sku] * store.quantity(sku) for sku in store.skus()), Decimal("0"))
