import importlib.util
import unittest
from pathlib import Path

from convert import to_bytes

ROOT = Path(__file__).resolve().parent.parent


def generator():
    spec = importlib.util.spec_from_file_location("gen_units", ROOT / "tools" / "gen_units.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class UnitsTest(unittest.TestCase):
    def test_binary_units(self):
        self.assertEqual(to_bytes(2, "KiB"), 2048)
        self.assertEqual(to_bytes(1.5, "MiB"), 1572864)

    def test_decimal_units_kept(self):
        self.assertEqual(to_bytes(1, "GB"), 10 ** 9)

    def test_table_is_generated_from_the_data(self):
        gen = generator()
        units = dict(gen.read_units())
        self.assertEqual(units.get("KiB"), 1024)
        self.assertEqual(units.get("MiB"), 1048576)
        table = (ROOT / "convert" / "units_table.py").read_text(encoding="utf-8")
        self.assertEqual(table, gen.render(gen.read_units()))


if __name__ == "__main__":
    unittest.main()
