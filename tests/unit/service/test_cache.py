"""The one LRU cache (service/cache.py): eviction order, size 0, batched reads and writes."""

from __future__ import annotations

from service.cache import LRUCache


def test_lru_drops_the_least_recently_used_and_reads_count_as_use():
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put_many([("a", 1), ("b", 2)])
    assert cache.get_many(["a", "x"]) == {"a": 1}  # "b" is now least recent; an absent key is left out
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2
    cache.put("a", 10)  # a rewrite replaces and refreshes
    cache.put("d", 4)
    assert cache.get_many(["a", "c", "d"]) == {"a": 10, "d": 4}
    cache.clear()
    assert len(cache) == 0 and cache.get("a") is None


def test_size_zero_keeps_nothing():
    off: LRUCache[str, int] = LRUCache(0)
    off.put_many([("a", 1)])
    assert off.get("a") is None and len(off) == 0
