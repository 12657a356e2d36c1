"""Hard negatives: passages that look like the answer but are not.

For a query with gold passages G, candidates come in this order, and a gold passage is never one:

1. other passages of the gold passages' own pages (same ``source``);
2. passages of closely related pages: same domain, nearest source path first (longest shared
   folder prefix, then nearest in sorted path order), e.g. ``faq/library.html`` for ``faq/programming.html``.

Within each page the order is a seeded shuffle, so reruns give the same negatives.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from service.retrieval.passage import Passage

if TYPE_CHECKING:
    from training.data.dataset import RetrieverExample


def _path_parts(source: str) -> list[str]:
    return [p for p in source.replace("\\", "/").split("/") if p]


def _shared_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a[:-1], b[:-1], strict=False):  # folders only; the file names differ anyway
        if x != y:
            break
        n += 1
    return n


class HardNegativeSampler:
    """Samples hard negatives from a corpus by page (``source``) and page proximity."""

    def __init__(self, passages: Iterable[Passage], *, related_pages: int = 8) -> None:
        self.by_id: dict[str, Passage] = {}
        self.by_source: dict[str, list[str]] = defaultdict(list)
        sources_by_domain: dict[str, set[str]] = defaultdict(set)
        for p in passages:
            self.by_id[p.doc_id] = p
            self.by_source[p.source].append(p.doc_id)
            sources_by_domain[p.domain].add(p.source)
        self.related_pages = related_pages
        self._sorted: dict[str, list[str]] = {d: sorted(s) for d, s in sources_by_domain.items()}
        self._position = {s: (d, i) for d, srcs in self._sorted.items() for i, s in enumerate(srcs)}
        self._related_cache: dict[str, list[str]] = {}

    def related(self, source: str) -> list[str]:
        """Other pages of the same domain, closest first (at most ``related_pages``)."""
        if source in self._related_cache:
            return self._related_cache[source]
        if source not in self._position:
            return []
        domain, i = self._position[source]
        pages = self._sorted[domain]
        me = _path_parts(source)
        ranked = sorted(
            (s for s in pages if s != source),
            key=lambda s: (-_shared_prefix(me, _path_parts(s)), abs(self._position[s][1] - i), s),
        )
        out = ranked[: self.related_pages]
        self._related_cache[source] = out
        return out

    def candidates(self, golds: Sequence[str], *, seed: int = 0) -> list[str]:
        """Every candidate negative in preference order (same page, then related pages); never a gold."""
        gold = set(golds)
        sources = []
        for g in golds:
            p = self.by_id.get(g)
            if p is not None and p.source not in sources:
                sources.append(p.source)
        rng = random.Random(f"{seed}:{'|'.join(sorted(gold))}")
        out: list[str] = []
        seen = set(gold)

        def take(source: str) -> None:
            ids = [d for d in self.by_source.get(source, []) if d not in seen]
            rng.shuffle(ids)
            out.extend(ids)
            seen.update(ids)

        for s in sources:
            take(s)
        for s in sources:
            for r in self.related(s):
                take(r)
        return out

    def sample(self, golds: Sequence[str], k: int, *, seed: int = 0) -> list[str]:
        """Up to ``k`` hard negatives for a query with gold passages ``golds``."""
        if k <= 0:
            return []
        return self.candidates(golds, seed=seed)[:k]


def drop_false_negatives(
    examples: Sequence[RetrieverExample],
    passages: dict[str, Passage],
    model,  # noqa: ANN001 - the SentenceTransformer about to be fine-tuned (the current model)
    *,
    margin: float,
    batch_size: int = 32,
) -> tuple[list, dict]:
    """Drop hard negatives that the current model scores within ``margin`` of the best positive, or above it.

    Same-page and related-page negatives are often passages that also answer the question; training
    pushes the query away from them. A negative n of query q is dropped when
    s(q, n) >= max over positives p of s(q, p) - margin (cosine similarity of the unit vectors).
    Returns the examples with their kept negatives (order kept) and counts.
    """
    from dataclasses import replace

    import numpy as np

    texts = sorted({d for e in examples for d in list(e.positives) + list(e.negatives) if d in passages})
    index = {d: i for i, d in enumerate(texts)}
    p_vecs = model.encode(
        [passages[d].text for d in texts], batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    q_vecs = model.encode(
        [e.query for e in examples], batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    out, checked, dropped = [], 0, 0
    for e, qv in zip(examples, q_vecs, strict=True):
        pos = [float(np.dot(qv, p_vecs[index[d]])) for d in e.positives if d in index]
        if not pos:
            out.append(e)
            continue
        bar = max(pos) - margin
        keep = []
        for d in e.negatives:
            checked += 1
            if d in index and float(np.dot(qv, p_vecs[index[d]])) >= bar:
                dropped += 1
            else:
                keep.append(d)
        out.append(replace(e, negatives=keep))
    return out, {"margin": margin, "negatives_checked": checked, "negatives_dropped": dropped}
