import tempfile
import unittest
from decimal import Decimal
from pathlib import Path

from inventory.persist import load, save
from inventory.report import low_stock, stock_value
from inventory.store import OutOfStock, Store


class StoreTest(unittest.TestCase):
    def test_add_and_remove(self):
        store = Store()
        self.assertEqual(store.add("A-1", 5), 5)
        self.assertEqual(store.remove("A-1", 2), 3)
        self.assertEqual(store.quantity("A-1"), 3)

    def test_out_of_stock(self):
        store = Store()
        store.add("A-1", 1)
        with self.assertRaises(OutOfStock):
            store.remove("A-1", 2)


class ReportTest(unittest.TestCase):
    def test_low_stock_and_value(self):
        store = Store()
        store.add("A", 1)
        store.add("B", 10)
        self.assertEqual(low_stock(store, 5), [("A", 1)])
        self.assertEqual(stock_value(store, {"A": Decimal("2.50"), "B": Decimal("1")}), Decimal("12.50"))


class PersistTest(unittest.TestCase):
    def test_round_trip(self):
        store = Store()
        store.add("B", 2)
        store.add("A", 1)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "stock.json"
            save(store, path)
            self.assertEqual(load(path).skus(), ["A", "B"])


if __name__ == "__main__":
    unittest.main()
