"""Federated search: each active domain returns its top-k, U = p_j * s, top-k by U across domains."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service.retrieval.passage import Hit, RankedHit
from service.retrieval.store import Store


def merge(per_domain: Mapping[str, Sequence[Hit]], probs: Mapping[str, float], top_k: int) -> list[RankedHit]:
    """Rank the union of the domains' hits by unified score U = p_j * s and keep the top ``top_k``.

    Ties are broken by the raw score, then by doc_id, so the order is deterministic.
    """
    ranked: dict[str, RankedHit] = {}
    for domain, hits in per_domain.items():
        p = float(probs[domain])
        for h in hits:
            r = RankedHit(passage=h.passage, score=h.score, domain_prob=p, unified_score=p * h.score)
            old = ranked.get(h.passage.doc_id)
            if old is None or r.unified_score > old.unified_score:
                ranked[h.passage.doc_id] = r
    order = sorted(ranked.values(), key=lambda r: (-r.unified_score, -r.score, r.passage.doc_id))
    return order[:top_k]


def search_domains(
    store: Store, vector: np.ndarray, domains: Sequence[str], limit: int, pool: ThreadPoolExecutor | None = None
) -> tuple[dict[str, list[Hit]], dict[str, float]]:
    """Search several domains concurrently; returns hits and milliseconds per domain."""

    def one(domain: str) -> tuple[str, list[Hit], float]:
        t0 = time.perf_counter()
        hits = store.search(domain, vector, limit)
        return domain, hits, (time.perf_counter() - t0) * 1000.0

    if pool is None or len(domains) <= 1:
        results = [one(d) for d in domains]
    else:
        results = list(pool.map(one, domains))
    return {d: h for d, h, _ in results}, {d: ms for d, _, ms in results}


def federated_search(
    store: Store,
    vector: np.ndarray,
    probs: Mapping[str, float],
    active: Sequence[str],
    top_k: int,
    pool: ThreadPoolExecutor | None = None,
) -> tuple[list[RankedHit], dict[str, float]]:
    """Search the active domains (top-k each) and merge by U = p_j * s."""
    per_domain, timings = search_domains(store, vector, active, top_k, pool)
    return merge(per_domain, probs, top_k), timings
