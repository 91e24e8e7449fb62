import unittest

from textutils.slug import slugify


class SlugTest(unittest.TestCase):
    def test_accents(self):
        self.assertEqual(slugify("Crème brûlée"), "creme-brulee")

    def test_runs_become_one_separator(self):
        self.assertEqual(slugify("a  b"), "a-b")


if __name__ == "__main__":
    unittest.main()
