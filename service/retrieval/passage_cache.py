"""An in-memory LRU map of an index's passages, so a ranking's passages cost a lookup, not a store read.

A retrieval reads the passages of its top-k from the store, one call per domain (the searches return
ids and scores only). On faq6 those reads took 0.3 ms at the median and up to 1 ms at p95 of a
~4 ms retrieval; from memory they take microseconds. A pipeline holds one cache for its index version
(a new version gets a new pipeline), filled by :meth:`PassageCache.warm` at load where an embedded index
fits, and by every read otherwise (a Qdrant server's collections are not scrolled whole at each load).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from service.cache import LRUCache
from service.retrieval.passage import Passage
from service.retrieval.store import Store

log = logging.getLogger("fedqa.store")


class PassageCache:
    """Thread-safe LRU of (domain, point id) -> passage, at most ``size`` entries (0: off)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: LRUCache[tuple[str, str], Passage] = LRUCache(size)

    def __len__(self) -> int:
        return len(self._items)

    def passages(self, store: Store, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        """The passages of ``point_ids`` in ``domain``: from memory, the rest read from ``store`` (and kept)."""
        found = {pid: p for (_, pid), p in self._items.get_many((domain, pid) for pid in point_ids).items()}
        missing = [pid for pid in point_ids if pid not in found]
        if missing:
            read = store.passages(domain, missing)
            self._put(domain, read.items())
            found.update(read)
        return found

    def warm(self, store: Store, domains: Iterable[str]) -> int:
        """Read every passage of ``domains`` into memory when they all fit; returns how many are held."""
        domains = list(domains)
        try:
            if self.size <= 0 or sum(store.count(d) for d in domains) > self.size:
                return len(self)
            for domain in domains:
                self._put(domain, ((p.point_id, p) for p in store.iter_passages(domain)))
        except Exception as exc:  # noqa: BLE001 - a store that cannot be read in whole is read per ranking instead
            log.warning("passages not cached at load (read per ranking instead): %s", exc)
        return len(self)

    def _put(self, domain: str, items: Iterable[tuple[str, Passage]]) -> None:
        self._items.put_many(((domain, pid), p) for pid, p in items)
