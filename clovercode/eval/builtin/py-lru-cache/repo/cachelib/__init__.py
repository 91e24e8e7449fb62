from cachelib.lru import LRUCache

__all__ = ["LRUCache"]
