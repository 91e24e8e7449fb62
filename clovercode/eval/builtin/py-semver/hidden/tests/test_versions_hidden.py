import unittest

from updater import needs_update
from versions import compare, latest, parse_version


class HiddenVersionTest(unittest.TestCase):
    def test_numeric_parts(self):
        self.assertEqual(compare("1.10.0", "1.9.0"), 1)
        self.assertEqual(compare("2.0.0", "10.0.0"), -1)
        self.assertEqual(compare("1.0.10", "1.0.9"), 1)

    def test_latest(self):
        self.assertEqual(latest(["1.9.0", "1.10.0", "1.2.3"]), "1.10.0")
        self.assertEqual(latest(["v0.9", "0.10"]), "0.10")

    def test_equal(self):
        self.assertEqual(compare("v3", "3.0.0"), 0)

    def test_updater(self):
        self.assertTrue(needs_update("1.9.0", "1.10.0"))
        self.assertFalse(needs_update("1.10.0", "1.9.0"))

    def test_errors(self):
        for bad in ("", "1..2", "1.2.3.4", "one"):
            with self.assertRaises(ValueError):
                parse_version(bad)
        with self.assertRaises(ValueError):
            latest([])


if __name__ == "__main__":
    unittest.main()
