"""Federated search: each active domain returns its top-k, U = w_j * s+ (+ the page prior's bonus;
:mod:`service.retrieval.unified`, the score the fits search with too), top-k by U across domains, then the passages of
those top-k only."""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from service.config import Settings
from service.retrieval.lexical import LexicalHits
from service.retrieval.page_prior import PriorBonus
from service.retrieval.passage import Hit, RankedHit, RankFeatures
from service.retrieval.passage_cache import PassageCache
from service.retrieval.store import Store
from service.retrieval.unified import positive_similarity, rank_order, unified_scores

__all__ = ["Candidate", "merge", "positive_similarity", "search_domains", "search_threads", "value_of", "with_passages"]


@dataclass(frozen=True)
class Candidate:
    """A hit placed in the federated ranking before its passage is read: U = w_j * s+, and what placed it."""

    domain: str
    point_id: str
    score: float
    domain_prob: float
    unified_score: float
    rank_score: float | None = None  # with a lexical ranking: its fusion with the ranking by U (the merge's order)
    features: RankFeatures = RankFeatures()


def merge(
    per_domain: Mapping[str, Sequence[Hit]],
    probs: Mapping[str, float],
    top_k: int,
    bonus: Mapping[str, float] | None = None,
    lexical: LexicalHits | None = None,
    router: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Rank the union of the domains' hits by unified score U = w_j * s+ and keep the top ``top_k``.

    ``probs`` holds each domain's weight w_j (p_j for mkpqa, c_j q_j^lambda for fused, 1 for uis);
    s+ = max(s, 0). ``bonus``: added to U by point id (the page prior, :mod:`service.retrieval.page_prior`), every hit
    given then being a candidate. U and the order are :mod:`service.retrieval.unified`'s: ties are broken by the raw
    score, then by point id, then domain, so the order is deterministic; a candidate whose U is not finite is not
    ranked. :func:`with_passages` reads the kept candidates' passages.

    ``lexical``: each domain's BM25 hits (:mod:`service.retrieval.lexical`). The candidates are then ordered by
    its :class:`~service.retrieval.lexical.RankFusion` of two rankings across the domains: by U, and by w_j * BM25; a
    candidate's ``rank_score`` is its fused score. A passage only the lexical search found gets as s the lowest s its domain's dense search
    returned (its s is at most that). ``router``: the router's p_j per domain, for the candidates' features.
    """
    add = bonus.total if isinstance(bonus, PriorBonus) else bonus
    rows = [
        (domain, h)
        for domain, hits in per_domain.items()
        # U grows with s within a domain, so only a domain's top_k in the tie order can be in the merged top_k (not so
        # with a bonus or a fusion).
        for h in (hits if add or lexical else heapq.nsmallest(top_k, hits, key=lambda h: (-h.score, h.point_id)))
    ]
    w = [float(probs[d]) for d, _ in rows]
    u = unified_scores(w, [h.score for _, h in rows], [add.get(h.point_id, 0.0) for _, h in rows] if add else None).tolist()
    kept: dict[tuple[str, str], int] = {}  # by (domain, point id): the same doc_id in two domains is two passages
    for i, (domain, h) in enumerate(rows):
        old = kept.get((domain, h.point_id))
        if old is None or u[i] > u[old]:
            kept[(domain, h.point_id)] = i
    idx = list(kept.values())
    by_u = [
        idx[j]
        for j in rank_order([u[i] for i in idx], [rows[i][1].score for i in idx], [rows[i][1].point_id for i in idx], [rows[i][0] for i in idx])
    ]
    # the lexical fusion reorders the whole dense ranking; without it only its top_k is kept
    order = [Candidate(rows[i][0], rows[i][1].point_id, rows[i][1].score, w[i], u[i]) for i in (by_u if lexical is not None else by_u[:top_k])]
    if lexical is not None:
        order = _fused(order, per_domain, probs, add, lexical, top_k)
    return [
        Candidate(c.domain, c.point_id, c.score, c.domain_prob, c.unified_score, c.rank_score, _features(c, router, bonus)) for c in order[:top_k]
    ]


def _ranked(candidates: Sequence[Candidate], values: Sequence[float]) -> list[Candidate]:
    """``candidates`` in rank order by ``values`` (U, or their fused rank score), ties as U's
    (:func:`~service.retrieval.unified.rank_order`)."""
    order = rank_order(values, [c.score for c in candidates], [c.point_id for c in candidates], [c.domain for c in candidates])
    return [candidates[i] for i in order]


def _features(c: Candidate, router: Mapping[str, float] | None, bonus: Mapping[str, float] | None) -> RankFeatures:
    """``c``'s features: what the merge read (its s, p_j, w_j, the page prior's terms) beside its fused ranks."""
    p = None if router is None else router.get(c.domain)
    page = nearest = demoted = None
    if isinstance(bonus, PriorBonus):
        page, nearest, demoted = bonus.page.get(c.point_id), bonus.nearest.get(c.point_id), bonus.demoted.get(c.point_id)
    elif bonus:
        page = bonus.get(c.point_id)
    f = c.features
    w = None if c.domain_prob == p else c.domain_prob
    return RankFeatures(c.score, p, w, page, nearest, demoted, f.dense_rank, f.lexical_rank, f.bm25)


def _fused(
    dense: list[Candidate],
    per_domain: Mapping[str, Sequence[Hit]],
    probs: Mapping[str, float],
    bonus: Mapping[str, float] | None,
    lexical: LexicalHits,
    top_k: int,
) -> list[Candidate]:
    """The dense order (by U) and the lexical one (by w_j * BM25) fused by reciprocal rank; the top ``top_k``, each
    with its ranks and BM25 score as features."""
    by_key = {(c.domain, c.point_id): c for c in dense}
    fusion = lexical.fusion
    dense_rank = {key: rank for rank, key in enumerate(by_key, start=1)}
    fused = {key: 1.0 / (fusion.k + rank) for key, rank in dense_rank.items()}
    floor = {d: min(h.score for h in hits) for d, hits in per_domain.items() if hits}
    lex = sorted(((d, h) for d, hits in lexical.hits.items() if d in probs for h in hits), key=lambda x: (-probs[x[0]] * x[1].score, x[1].point_id))
    lexical_rank: dict[tuple[str, str], tuple[int, float]] = {}
    for rank, (domain, hit) in enumerate(lex, start=1):
        key = (domain, hit.point_id)
        fused[key] = fused.get(key, 0.0) + fusion.lexical_weight / (fusion.k + rank)
        lexical_rank[key] = (rank, hit.score)
        if key not in by_key:
            by_key[key] = Candidate(domain, hit.point_id, floor.get(domain, 0.0), float(probs[domain]), 0.0)
    only = [key for key in fused if key not in dense_rank]  # found by the lexical search alone: U of s = its domain's floor
    add = [bonus.get(k[1], 0.0) for k in only] if bonus else None
    u = unified_scores([by_key[k].domain_prob for k in only], [by_key[k].score for k in only], add)
    for key, value in zip(only, u.tolist(), strict=True):
        by_key[key] = replace(by_key[key], unified_score=value)
    with_fused = [replace(by_key[key], rank_score=value) for key, value in fused.items()]
    out = _ranked(with_fused, [value_of(c) for c in with_fused])
    kept = []
    for c in out[:top_k]:
        key = (c.domain, c.point_id)
        lex_rank, bm25 = lexical_rank.get(key, (None, None))
        kept.append(replace(c, features=RankFeatures(dense_rank=dense_rank.get(key), lexical_rank=lex_rank, bm25=bm25)))
    return kept


def value_of(c: Candidate) -> float:
    """The candidate's place in the merge: its fused rank score, or U."""
    return c.unified_score if c.rank_score is None else c.rank_score


def with_passages(store: Store, ranked: Sequence[Candidate], cache: PassageCache | None = None) -> list[RankedHit]:
    """The ranking with its passages (the searches return none): from ``cache`` where it holds them, the rest
    read from the store in one call per domain. Each hit's ``rank_score`` is its place in the merge (:func:`value_of`)."""
    wanted: dict[str, list[str]] = {}
    for c in ranked:
        wanted.setdefault(c.domain, []).append(c.point_id)
    found = {d: cache.passages(store, d, ids) if cache is not None else store.passages(d, ids) for d, ids in wanted.items()}
    return [
        RankedHit(
            found[c.domain][c.point_id],
            c.score,
            c.domain_prob,
            c.unified_score,
            fused_score=c.rank_score,
            rank_score=value_of(c),
            features=c.features,
        )
        for c in ranked
        if c.point_id in found[c.domain]
    ]


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


def search_threads(settings: Settings, store: Store, domains: int) -> int:
    """Threads that search a request's domains at once (FEDQA_SEARCH_THREADS; default: see :class:`Settings`)."""
    return settings.search_threads or (1 if store.backend == "qdrant-edge" else min(8, max(1, domains)))
