import unittest

from schedule import busy_minutes, merge


class HiddenMergeTest(unittest.TestCase):
    def test_unsorted(self):
        self.assertEqual(merge([(100, 200), (0, 50), (40, 120)]), [(0, 200)])

    def test_separate(self):
        self.assertEqual(merge([(300, 400), (0, 100)]), [(0, 100), (300, 400)])

    def test_touching(self):
        self.assertEqual(merge([(10, 20), (20, 30), (30, 40)]), [(10, 40)])

    def test_contained(self):
        self.assertEqual(merge([(0, 100), (10, 20)]), [(0, 100)])

    def test_input_not_modified(self):
        data = [(5, 6), (1, 2)]
        merge(data)
        self.assertEqual(data, [(5, 6), (1, 2)])

    def test_busy_minutes(self):
        self.assertEqual(busy_minutes([(60, 120), (0, 90), (200, 230)]), 150)

    def test_empty(self):
        self.assertEqual(merge([]), [])


if __name__ == "__main__":
    unittest.main()
