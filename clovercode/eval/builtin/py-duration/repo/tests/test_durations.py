import unittest

from durations import format_duration, parse_duration


class DurationTest(unittest.TestCase):
    def test_single(self):
        self.assertEqual(parse_duration("90s"), 90)

    def test_compound(self):
        self.assertEqual(parse_duration("1h30m"), 5400)

    def test_format(self):
        self.assertEqual(format_duration(5400), "1h30m")


if __name__ == "__main__":
    unittest.main()
