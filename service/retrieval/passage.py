"""The unit of retrieval: a passage, and a passage found by a search."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

_NAMESPACE = uuid.UUID("6f1c3c9e-4f7a-4c55-9a51-0d1f3b1e8a11")


def point_id(doc_id: str) -> str:
    """Stable store id of the passage ``doc_id``, so re-ingesting the same passage overwrites it."""
    return str(uuid.uuid5(_NAMESPACE, doc_id))


@dataclass(frozen=True)
class Passage:
    """A passage with the provenance every answer must cite."""

    doc_id: str
    domain: str
    title: str
    source: str
    text: str

    @property
    def point_id(self) -> str:
        """Stable store id derived from doc_id (:func:`point_id`)."""
        return point_id(self.doc_id)

    def payload(self) -> dict[str, Any]:
        """The payload stored beside the vector: the five fields (written out: ``dataclasses.asdict`` deep-copies, and
        took most of the time of a response's sources)."""
        return {"doc_id": self.doc_id, "domain": self.domain, "title": self.title, "source": self.source, "text": self.text}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Passage:
        """Rebuild a passage from a stored payload."""
        return cls(**{k: str(payload.get(k, "")) for k in ("doc_id", "domain", "title", "source", "text")})


@dataclass(frozen=True)
class Hit:
    """A point returned by one domain's search: its store id and similarity score s.

    Searches return no payload (reading and converting every hit's text cost more than the search
    itself); the passages of the hits a ranking keeps are read afterwards with ``Store.passages``.
    """

    point_id: str
    score: float


@dataclass(frozen=True)
class RankFeatures:
    """What placed one passage in its ranking, as the merge and the reranker computed them (None: not computed for
    this request). ``similarity`` s; ``product_probability`` the router's p_j of its product; ``weight`` the
    strategy's weight w_j on s where it is not p_j itself; ``page_prior`` the page prior's bonus; ``known_answer`` the
    cosine of the question to the nearest counted question the passage answers and ``known_answer_penalty`` what U
    lost for it; ``dense_rank`` / ``lexical_rank`` its ranks by U and by w_j * BM25 when the two are fused, ``bm25`` its
    BM25 score; ``rerank`` the reranker's logit; ``question_rank`` its rank in its own question's ranking (a message
    asking several questions, interleaved by rank). Where a fitted ranking model orders the passages
    (:mod:`service.ranking`) every feature it reads is shown too: ``log_product_probability``, ``domain_best_gap``,
    ``page_answers``, ``is_known_answer``, ``known_answer_squared``, ``bm25_share``, ``lexical_only``, ``dense_reciprocal_rank``,
    ``lexical_reciprocal_rank``, ``reranked`` (1: the reranker scored it; :class:`service.ranking.features.Feature`)."""

    similarity: float | None = None
    product_probability: float | None = None
    weight: float | None = None
    page_prior: float | None = None
    known_answer: float | None = None
    known_answer_penalty: float | None = None
    dense_rank: int | None = None
    lexical_rank: int | None = None
    bm25: float | None = None
    rerank: float | None = None
    question_rank: int | None = None
    log_product_probability: float | None = None
    domain_best_gap: float | None = None
    page_answers: float | None = None
    is_known_answer: float | None = None
    known_answer_squared: float | None = None
    bm25_share: float | None = None
    lexical_only: float | None = None
    dense_reciprocal_rank: float | None = None
    lexical_reciprocal_rank: float | None = None
    reranked: float | None = None

    def values(self) -> dict[str, float]:
        """The features computed, by name (what a source shows as ``features``)."""
        return {f.name: float(v) for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class RankedHit:
    """A hit placed in the federated ranking: unified score U = w_j * s+ (and, once reranked, the reranker's
    calibrated score); ``fused_score``: with a lexical index, the fusion of its ranks by U and by BM25, which placed it
    in the merge; ``rank_score``: the key the ranking is sorted by (None: :attr:`order_key`); ``features``: what
    decided its place."""

    passage: Passage
    score: float
    domain_prob: float
    unified_score: float
    rerank_score: float | None = None
    fused_score: float | None = None
    rank_score: float | None = None
    features: RankFeatures = RankFeatures()

    @property
    def order_key(self) -> float:
        """What the merge ordered it by: the fused rank score when there was one, else U."""
        return self.unified_score if self.fused_score is None else self.fused_score

    @property
    def final_key(self) -> float:
        """What the final ranking is sorted by: :attr:`rank_score`, or the merge's :attr:`order_key`."""
        return self.order_key if self.rank_score is None else self.rank_score


def descending(hits: Sequence[RankedHit]) -> list[RankedHit]:
    """``hits`` in their order, each one's ``rank_score`` at most the one above it: a stage that places passages in
    turns (the reranked top-N before the rest, each question's r-th passage before any (r+1)-th, one product's
    passages after another's) sorts by the turn first, and the key shown stays non-increasing down the list."""
    out: list[RankedHit] = []
    for h in hits:
        key = h.final_key if not out else min(h.final_key, out[-1].final_key)
        out.append(h if key == h.rank_score else replace(h, rank_score=key))
    return out
