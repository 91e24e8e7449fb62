import unittest

from schedule import busy_minutes, merge


class MergeTest(unittest.TestCase):
    def test_overlapping_sorted(self):
        self.assertEqual(merge([(0, 30), (15, 45)]), [(0, 45)])

    def test_back_to_back(self):
        self.assertEqual(merge([(600, 660), (660, 720)]), [(600, 720)])


if __name__ == "__main__":
    unittest.main()
