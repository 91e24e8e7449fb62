import unittest

from durations import format_duration, parse_duration


class HiddenDurationTest(unittest.TestCase):
    def test_compound(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("2d3h4m5s"), 2 * 86400 + 3 * 3600 + 4 * 60 + 5)

    def test_whitespace(self):
        self.assertEqual(parse_duration(" 15m "), 900)

    def test_invalid(self):
        for bad in ("5x", "", "h", "10", "1h 30m", "abc1h"):
            with self.assertRaises(ValueError, msg=bad):
                parse_duration(bad)

    def test_round_trip(self):
        for seconds in (1, 59, 61, 3600, 5400, 90061):
            self.assertEqual(parse_duration(format_duration(seconds)), seconds)


if __name__ == "__main__":
    unittest.main()
