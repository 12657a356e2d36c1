"""The unit of retrieval: a passage, and a passage found by a search."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
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
class RankedHit:
    """A hit placed in the federated ranking: unified score U = p_j * s (and, once reranked, the reranker's
    calibrated score; with a lexical index, ``rank_score``: the fusion of its ranks by U and by BM25, which placed it)."""

    passage: Passage
    score: float
    domain_prob: float
    unified_score: float
    rerank_score: float | None = None
    rank_score: float | None = None

    @property
    def order_key(self) -> float:
        """What the merge ordered it by: the fused rank score when there was one, else U."""
        return self.unified_score if self.rank_score is None else self.rank_score
