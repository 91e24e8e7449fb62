import unittest

from calc import mean, spread


class CalcTest(unittest.TestCase):
    def test_mean_of_integers(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_mean_of_one(self):
        self.assertEqual(mean([7]), 7)

    def test_spread(self):
        self.assertEqual(spread([3, 9, 4]), 6)


if __name__ == "__main__":
    unittest.main()
