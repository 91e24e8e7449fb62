"""Stock levels of a small warehouse."""


class OutOfStock(Exception):
    """Raised when more items are taken than are in stock."""


class Store:
    """Quantities per SKU (a non-empty string). Quantities are whole numbers, never negative."""

    def __init__(self):
        self._stock: dict[str, int] = {}

    def add(self, sku: str, count: int) -> int:
        """Put ``count`` (> 0, else ValueError) items of ``sku`` in stock; return the new quantity."""
        if count <= 0:
            raise ValueError("count must be positive")
        self._stock[sku] = self._stock.get(sku, 0) + count
        return self._stock[sku]

    def remove(self, sku: str, count: int) -> int:
        """Take ``count`` (> 0, else ValueError) items out; OutOfStock (and no change) if there are
        fewer. A SKU whose quantity drops to 0 is forgotten. Return the new quantity."""
        if count <= 0:
            raise ValueError("count must be positive")
        have = self._stock.get(sku, 0)
        if count > have:
            raise OutOfStock(f"{sku}: {count} wanted, {have} in stock")
        if count == have:
            del self._stock[sku]
            return 0
        self._stock[sku] = have - count
        return self._stock[sku]

    def quantity(self, sku: str) -> int:
        """Items of ``sku`` in stock (0 for an unknown SKU)."""
        return self._stock.get(sku, 0)

    def skus(self) -> list[str]:
        """SKUs in stock, sorted."""
        return sorted(self._stock)
