import unittest
from datetime import date

from calendar_utils.ranges import date_range, nights


class DateRangeTest(unittest.TestCase):
    def test_includes_both_ends(self):
        self.assertEqual(date_range(date(2024, 1, 1), date(2024, 1, 3)),
                         [date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)])

    def test_rejects_zero_step(self):
        with self.assertRaises(ValueError):
            date_range(date(2024, 1, 1), date(2024, 1, 3), step_days=0)

    def test_nights(self):
        self.assertEqual(nights(date(2024, 1, 1), date(2024, 1, 4)), 3)


if __name__ == "__main__":
    unittest.main()
