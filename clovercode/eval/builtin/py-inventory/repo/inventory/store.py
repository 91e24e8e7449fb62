"""Stock levels of a small warehouse."""


class OutOfStock(Exception):
    """Raised when more items are taken than are in stock."""


class Store:
    """Quantities per SKU (a non-empty string). Quantities are whole numbers, never negative."""

    def __init__(self):
        self._stock: dict[str, int] = {}

    def add(self, sku: str, count: int) -> int:
        """Put ``count`` (> 0, else ValueError) items of ``sku`` in stock; return the new quantity."""
        raise NotImplementedError

    def remove(self, sku: str, count: int) -> int:
        """Take ``count`` (> 0, else ValueError) items out; OutOfStock (and no change) if there are
        fewer. A SKU whose quantity drops to 0 is forgotten. Return the new quantity."""
        raise NotImplementedError

    def quantity(self, sku: str) -> int:
        """Items of ``sku`` in stock (0 for an unknown SKU)."""
        raise NotImplementedError

    def skus(self) -> list[str]:
        """SKUs in stock, sorted."""
        return sorted(self._stock)
