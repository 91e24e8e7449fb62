import unittest

from cachelib import LRUCache


class LRUCacheTest(unittest.TestCase):
    def test_get_and_put(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        self.assertEqual(cache.get("a"), 1)
        self.assertIsNone(cache.get("missing"))

    def test_evicts_least_recently_used(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.get("a")
        cache.put("c", 3)
        self.assertIn("a", cache)
        self.assertIn("c", cache)
        self.assertNotIn("b", cache)


if __name__ == "__main__":
    unittest.main()
