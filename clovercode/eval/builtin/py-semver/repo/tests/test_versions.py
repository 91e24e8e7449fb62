import unittest

from versions import compare, latest, parse_version


class VersionTest(unittest.TestCase):
    def test_prefix_and_padding(self):
        self.assertEqual(compare("v1.2", "1.2.0"), 0)

    def test_double_digit_minor(self):
        self.assertEqual(compare("1.10.0", "1.9.0"), 1)

    def test_malformed(self):
        with self.assertRaises(ValueError):
            parse_version("1.x")


if __name__ == "__main__":
    unittest.main()
