import unittest

from cachelib import LRUCache


class HiddenLRUTest(unittest.TestCase):
    def test_newest_entry_survives(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.put("c", 3)
        self.assertEqual(sorted(k for k in "abc" if k in cache), ["b", "c"])

    def test_get_refreshes(self):
        cache = LRUCache(3)
        for key in "abc":
            cache.put(key, key.upper())
        cache.get("a")
        cache.put("d", "D")
        self.assertNotIn("b", cache)
        self.assertEqual(cache.get("a"), "A")

    def test_update_refreshes_without_growing(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.put("a", 10)
        cache.put("c", 3)
        self.assertEqual(len(cache), 2)
        self.assertEqual(cache.get("a"), 10)
        self.assertNotIn("b", cache)

    def test_capacity_one(self):
        cache = LRUCache(1)
        cache.put("a", 1)
        cache.put("b", 2)
        self.assertEqual((cache.get("a"), cache.get("b")), (None, 2))

    def test_bad_capacity(self):
        with self.assertRaises(ValueError):
            LRUCache(0)


if __name__ == "__main__":
    unittest.main()
