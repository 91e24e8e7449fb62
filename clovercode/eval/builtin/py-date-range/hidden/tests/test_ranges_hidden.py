import unittest
from datetime import date

from calendar_utils.ranges import date_range


class HiddenDateRangeTest(unittest.TestCase):
    def test_includes_end(self):
        self.assertEqual(date_range(date(2024, 2, 27), date(2024, 3, 1)),
                         [date(2024, 2, 27), date(2024, 2, 28), date(2024, 2, 29), date(2024, 3, 1)])

    def test_single_day(self):
        self.assertEqual(date_range(date(2024, 5, 5), date(2024, 5, 5)), [date(2024, 5, 5)])

    def test_end_before_start(self):
        self.assertEqual(date_range(date(2024, 5, 5), date(2024, 5, 1)), [])

    def test_step_not_landing_on_end(self):
        self.assertEqual(date_range(date(2024, 1, 1), date(2024, 1, 6), step_days=2),
                         [date(2024, 1, 1), date(2024, 1, 3), date(2024, 1, 5)])

    def test_step_landing_on_end(self):
        self.assertEqual(date_range(date(2024, 1, 1), date(2024, 1, 5), step_days=2),
                         [date(2024, 1, 1), date(2024, 1, 3), date(2024, 1, 5)])


if __name__ == "__main__":
    unittest.main()
