import json
import tempfile
import unittest
from decimal import Decimal
from pathlib import Path

from inventory.persist import load, save
from inventory.report import low_stock, stock_value
from inventory.store import OutOfStock, Store


class HiddenStoreTest(unittest.TestCase):
    def test_unknown_is_zero(self):
        self.assertEqual(Store().quantity("nope"), 0)

    def test_bad_counts(self):
        store = Store()
        for bad in (0, -3):
            with self.assertRaises(ValueError):
                store.add("A", bad)
        store.add("A", 1)
        with self.assertRaises(ValueError):
            store.remove("A", 0)

    def test_failed_remove_changes_nothing(self):
        store = Store()
        store.add("A", 2)
        with self.assertRaises(OutOfStock):
            store.remove("A", 3)
        self.assertEqual(store.quantity("A"), 2)
        with self.assertRaises(OutOfStock):
            store.remove("B", 1)

    def test_empty_sku_forgotten(self):
        store = Store()
        store.add("A", 2)
        self.assertEqual(store.remove("A", 2), 0)
        self.assertEqual(store.skus(), [])


class HiddenReportTest(unittest.TestCase):
    def test_low_stock_order(self):
        store = Store()
        for sku, count in (("C", 3), ("A", 3), ("B", 1), ("D", 9)):
            store.add(sku, count)
        self.assertEqual(low_stock(store, 5), [("B", 1), ("A", 3), ("C", 3)])
        self.assertEqual(low_stock(store, 1), [])

    def test_value_needs_prices(self):
        store = Store()
        store.add("A", 1)
        self.assertEqual(stock_value(Store(), {}), Decimal("0"))
        with self.assertRaises(KeyError):
            stock_value(store, {})


class HiddenPersistTest(unittest.TestCase):
    def test_file_format(self):
        store = Store()
        store.add("B", 2)
        store.add("A", 1)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.json"
            save(store, path)
            data = json.loads(path.read_text())
            self.assertEqual(data, {"format": 1, "stock": {"A": 1, "B": 2}})
            self.assertEqual(list(data["stock"]), ["A", "B"])
            loaded = load(path)
            self.assertEqual((loaded.quantity("A"), loaded.quantity("B")), (1, 2))

    def test_wrong_format(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.json"
            path.write_text(json.dumps({"format": 2, "stock": {}}))
            with self.assertRaises(ValueError):
                load(path)


if __name__ == "__main__":
    unittest.main()
