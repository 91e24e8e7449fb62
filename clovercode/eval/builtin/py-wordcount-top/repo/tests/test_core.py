import unittest

from wordcount.core import count_words, ranked


class CoreTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(count_words("The cat and the hat")["the"], 2)

    def test_ranked(self):
        self.assertEqual(ranked(count_words("b a b c a b")), [("b", 3), ("a", 2), ("c", 1)])


if __name__ == "__main__":
    unittest.main()
