import unittest

from convert import human, to_bytes


class ConvertTest(unittest.TestCase):
    def test_decimal(self):
        self.assertEqual(to_bytes(1.5, "kB"), 1500)

    def test_human(self):
        self.assertEqual(human(1500), "1.5 kB")


if __name__ == "__main__":
    unittest.main()
