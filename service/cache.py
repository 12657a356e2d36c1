"""The one in-memory cache: a thread-safe least-recently-used map of at most ``size`` entries (0: keeps nothing).

Used for the query vectors (:mod:`service.retrieval.encoder`), the passages of rankings
(:mod:`service.retrieval.passage_cache`) and the passages' sentence vectors (:mod:`service.generation.extractive`).
A leaf module: it imports nothing of fedqa.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A thread-safe LRU map; a read or a write makes its key the most recently used."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        """The value of ``key``, or None when it is not held."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """The values held of ``keys`` (under one lock); the others are left out."""
        found: dict[K, V] = {}
        with self._lock:
            for key in keys:
                value = self._items.get(key)
                if value is not None:
                    self._items.move_to_end(key)
                    found[key] = value
        return found

    def put(self, key: K, value: V) -> None:
        """Hold ``value`` under ``key``, dropping the least recently used entries beyond ``size``."""
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """Hold every (key, value) of ``items`` (under one lock), then drop the least recently used beyond ``size``."""
        if self.size <= 0:
            return
        with self._lock:
            for key, value in items:
                self._items[key] = value
                self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._items.clear()
