import unittest

from textutils.slug import slugify


class HiddenSlugTest(unittest.TestCase):
    def test_issue_example(self):
        self.assertEqual(slugify("Hello,  World!"), "hello-world")

    def test_ends(self):
        self.assertEqual(slugify("  --Python 3.12--  "), "python-3-12")

    def test_custom_separator(self):
        self.assertEqual(slugify("Hello, World", separator="_"), "hello_world")

    def test_truncation_does_not_end_with_separator(self):
        self.assertEqual(slugify("hello big world", max_length=10), "hello-big")
        self.assertEqual(slugify("hello world", max_length=6), "hello")

    def test_only_punctuation(self):
        self.assertEqual(slugify("!!!"), "")


if __name__ == "__main__":
    unittest.main()
