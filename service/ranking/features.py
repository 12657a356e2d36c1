"""A question's candidate pool and its named features: the one function serving, fitting and benchmarks read.

The pool is every domain's top ``depth`` dense hits and top ``depth`` BM25 hits, each passage once; a passage only the
lexical search found gets as s the lowest s its domain's dense search returned, as
:func:`service.retrieval.federated.merge` gives it. The pipeline searches every domain for it (or the products a
question names, as the fused strategy does whenever it ranks as uis): the fused fit's gate, breadth and weights are off
(:meth:`~service.routing.fusion.FusionParams.every_domain`): out of sample on faq6 fold a, the fitted breadth (2 of 6
domains searched in two of its five refits) cost the model 0.740 -> 0.701 Acc@1. Every candidate gets the features of
:class:`Feature`, computed from the question alone (its vector, the router's p, the page prior's counts as they stand
while it is ranked: a labelled question is ranked with the questions sharing its gold passages left out,
``training/page_prior.py`` ``unseen``). A ranking model (:mod:`service.ranking.model`) is a function of these columns.

With a reranker the pool's top N by the default ranking (the served merge's score of the same candidates; N a setting,
``FEDQA_RANK_RERANK_DEPTH``, stored with the model) also get the cross-encoder's logit (:func:`reranked`); the others keep
the neutral 0 and an indicator 0, so that a linear score gives the scored ones their own offset.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.choices import Choice
from service.retrieval.lexical import LexicalHits, RankFusion
from service.retrieval.page_prior import PagePrior
from service.retrieval.passage import Hit, RankFeatures

DEPTH = 30  # the pool's default depth: the page prior's deepest search (training/page_prior.py DEPTH_GRID)
_TINY = 1e-9  # the router's p is clipped here before its log (fusion.py's logit clips at the same value)


class Feature(Choice):
    """One named feature of a candidate passage (a column of :class:`Pool`'s matrix)."""

    SIMILARITY = "similarity"  # s: the cosine of the question and the passage
    LOG_PRODUCT_PROBABILITY = "log_product_probability"  # log p_j: the router's calibrated p of its product
    DOMAIN_BEST_GAP = "domain_best_gap"  # its product's best s minus the best s of every product searched (<= 0)
    PAGE_ANSWERS = "page_answers"  # log(1 + n): n the labelled questions answered on its page (the page prior's count)
    IS_KNOWN_ANSWER = "is_known_answer"  # 1 when it answers a counted labelled question, else 0
    KNOWN_ANSWER = "known_answer"  # the cosine of the question to the nearest counted question it answers (0: none)
    KNOWN_ANSWER_SQUARED = "known_answer_squared"  # its square: with it the score can lift a known answer near cosine 1 only
    BM25_SHARE = "bm25_share"  # its BM25 over the best BM25 of its product for the question (0: not a lexical hit)
    LEXICAL_ONLY = "lexical_only"  # 1 when only the lexical search found it, else 0
    DENSE_RECIPROCAL_RANK = "dense_reciprocal_rank"  # 1 / (k + its rank by s among the pool's dense hits), 0: none
    LEXICAL_RECIPROCAL_RANK = "lexical_reciprocal_rank"  # 1 / (k + its rank by BM25 among the pool's lexical hits), 0: none
    RERANK = "rerank"  # the reranker's logit, for the default ranking's top N of the pool (0: not scored)
    RERANKED = "reranked"  # 1 when the reranker scored it (one of the default ranking's top N), else 0


FEATURES: tuple[Feature, ...] = tuple(Feature)
#: the features only a reranker gives (0 in a pool built without one)
RERANK_FEATURES: tuple[Feature, ...] = (Feature.RERANK, Feature.RERANKED)


@dataclass(frozen=True)
class PoolEntry:
    """One candidate: its domain and store id, s, and its domain's merge weight w_j (for U = w_j * s+, shown)."""

    domain: str
    point_id: str
    score: float
    weight: float


@dataclass(frozen=True)
class Pool:
    """A question's candidates and their feature matrix (rows: ``entries``; columns: :data:`FEATURES`)."""

    entries: tuple[PoolEntry, ...]
    matrix: np.ndarray  # (len(entries), len(FEATURES)) float64

    def __post_init__(self) -> None:
        if self.matrix.shape != (len(self.entries), len(FEATURES)):
            raise ValueError(
                f"a pool of {len(self.entries)} candidates needs a ({len(self.entries)}, {len(FEATURES)}) matrix, got {self.matrix.shape}"
            )

    def __len__(self) -> int:
        return len(self.entries)

    def columns(self, names: Sequence[Feature]) -> np.ndarray:
        """The columns ``names``, in that order."""
        return self.matrix[:, [FEATURES.index(Feature(n)) for n in names]]

    def rank_features(self, row: int, probability: float | None) -> RankFeatures:
        """Row ``row``'s features as a source shows them (``probability``: the router's p_j of its product; its merge
        weight w_j shown as ``weight`` where it is not p_j, as :func:`service.retrieval.federated.merge` shows it)."""
        x = dict(zip(FEATURES, self.matrix[row].tolist(), strict=True))
        w = self.entries[row].weight
        known = x[Feature.IS_KNOWN_ANSWER] > 0
        scored = x[Feature.RERANKED] > 0
        return RankFeatures(
            similarity=x[Feature.SIMILARITY],
            product_probability=probability,
            weight=None if w == probability else w,
            known_answer=x[Feature.KNOWN_ANSWER] if known else None,
            log_product_probability=x[Feature.LOG_PRODUCT_PROBABILITY],
            domain_best_gap=x[Feature.DOMAIN_BEST_GAP],
            page_answers=x[Feature.PAGE_ANSWERS],
            is_known_answer=x[Feature.IS_KNOWN_ANSWER],
            known_answer_squared=x[Feature.KNOWN_ANSWER_SQUARED],
            bm25_share=x[Feature.BM25_SHARE],
            lexical_only=x[Feature.LEXICAL_ONLY],
            dense_reciprocal_rank=x[Feature.DENSE_RECIPROCAL_RANK],
            lexical_reciprocal_rank=x[Feature.LEXICAL_RECIPROCAL_RANK],
            rerank=x[Feature.RERANK] if scored else None,
            reranked=x[Feature.RERANKED],
        )

    def keys(self) -> list[tuple[str, str]]:
        """Each candidate's (domain, point id), in row order."""
        return [(e.domain, e.point_id) for e in self.entries]


def candidate_pool(
    per_domain: Mapping[str, Sequence[Hit]],
    weights: Mapping[str, float],
    probs: Mapping[str, float],
    depth: int,
    *,
    lexical: LexicalHits | None = None,
    prior: PagePrior | None = None,
    vector: np.ndarray | None = None,
) -> Pool:
    """The pool of one question searched in the domains of ``weights`` (their hits in ``per_domain``), with its features.

    ``probs``: the router's p_j per domain; ``lexical``: each domain's BM25 hits; ``prior``: the page prior as it stands
    for this question (its counts at any fitted weight, and its known answers with ``vector``, the query vector).
    Candidates are in a fixed order: by domain (``weights``' order), dense hits by s, then lexical-only hits by BM25.
    """
    if depth < 1:
        raise ValueError(f"a pool needs depth >= 1, got {depth}")
    domains = [d for d in weights if d in per_domain or (lexical is not None and d in lexical.hits)]
    dense = {d: sorted(per_domain.get(d, ()), key=lambda h: (-h.score, h.point_id))[:depth] for d in domains}
    lex = {d: sorted(lexical.hits.get(d, ()), key=lambda h: (-h.score, h.point_id))[:depth] if lexical is not None else [] for d in domains}
    best = {d: hits[0].score for d, hits in dense.items() if hits}
    top = max(best.values(), default=0.0)
    nearest = dict(zip(prior.known, prior.nearest(vector).tolist(), strict=True)) if prior is not None and vector is not None and prior.known else {}
    counts = prior.counts if prior is not None else {}
    k = RankFusion().k  # the reciprocal rank fusion's constant (Cormack et al.), as the lexical fusion reads ranks
    dense_rank = _ranks((d, h) for d in domains for h in dense[d])
    lexical_rank = _ranks((d, h) for d in domains for h in lex[d])
    entries: list[PoolEntry] = []
    rows: list[list[float]] = []
    for d in domains:
        w, logp = float(weights[d]), math.log(max(float(probs.get(d, 0.0)), _TINY))
        gap = best[d] - top if d in best else -1.0 - top  # a domain without dense hits: below any s
        bm25_top = max((h.score for h in lex[d]), default=0.0)
        bm25 = {h.point_id: h.score for h in lex[d]}
        floor = dense[d][-1].score if dense[d] else 0.0
        found = [(h.point_id, h.score, False) for h in dense[d]]
        seen = {pid for pid, _, _ in found}
        found += [(h.point_id, floor, True) for h in lex[d] if h.point_id not in seen]
        for pid, s, only_lexical in found:
            c = nearest.get(pid)
            entries.append(PoolEntry(d, pid, s, w))
            x = {
                Feature.SIMILARITY: s,
                Feature.LOG_PRODUCT_PROBABILITY: logp,
                Feature.DOMAIN_BEST_GAP: gap,
                Feature.PAGE_ANSWERS: counts.get(pid, 0.0),
                Feature.IS_KNOWN_ANSWER: 1.0 if c is not None else 0.0,
                Feature.KNOWN_ANSWER: c if c is not None else 0.0,
                Feature.KNOWN_ANSWER_SQUARED: c * c if c is not None else 0.0,
                Feature.BM25_SHARE: bm25[pid] / bm25_top if pid in bm25 and bm25_top > 0 else 0.0,
                Feature.LEXICAL_ONLY: 1.0 if only_lexical else 0.0,
                Feature.DENSE_RECIPROCAL_RANK: 1.0 / (k + dense_rank[(d, pid)]) if (d, pid) in dense_rank else 0.0,
                Feature.LEXICAL_RECIPROCAL_RANK: 1.0 / (k + lexical_rank[(d, pid)]) if (d, pid) in lexical_rank else 0.0,
                Feature.RERANK: 0.0,  # neutral until a reranker scores it (reranked)
                Feature.RERANKED: 0.0,
            }
            rows.append([x[f] for f in FEATURES])
    matrix = np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
    return Pool(tuple(entries), matrix)


def reranked(pool: Pool, logits: Mapping[tuple[str, str], float]) -> Pool:
    """``pool`` with the reranker's logit of each candidate in ``logits`` (by (domain, point id): the default ranking's
    top N, read by the pipeline) and its indicator 1; the other candidates keep the neutral 0 and the indicator 0."""
    matrix = pool.matrix.copy()
    col, flag = FEATURES.index(Feature.RERANK), FEATURES.index(Feature.RERANKED)
    for i, key in enumerate(pool.keys()):
        if key in logits:
            matrix[i, col], matrix[i, flag] = float(logits[key]), 1.0
    return Pool(pool.entries, matrix)


def _ranks(hits: Iterable[tuple[str, Hit]]) -> dict[tuple[str, str], int]:
    """Each (domain, point id)'s rank (from 1) by score across the domains (ties: by point id, then domain)."""
    order = sorted(hits, key=lambda x: (-x[1].score, x[1].point_id, x[0]))
    return {(d, h.point_id): r for r, (d, h) in enumerate(order, start=1)}
