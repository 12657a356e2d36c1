"""What retrieval hands to the rest of the request: the prepared query and the retrieval of a question.

A leaf module (no pipeline import), so the components that build or read these never import the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service.ranking.features import Pool
from service.retrieval.passage import RankedHit
from service.schemas import Routing


@dataclass
class Prepared:
    """What every strategy shares for one query: router probabilities and the query vector."""

    probs: dict[str, float]
    vector: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    """One question of a message, as retrieval split it, and its query vector (None: the answer embeds it);
    ``ranking``: the (domain, doc_id) of its own ranking's passages, best first, where the message's questions were
    retrieved each on its own (empty: the message was searched whole; the answer quotes it from the joint ranking)."""

    text: str
    vector: np.ndarray | None = None
    ranking: tuple[tuple[str, str], ...] = ()


@dataclass
class Retrieval:
    """The retrieval half of an answer: what was searched, the ranking, and the questions the answer is to
    (``parts``: the message's questions in order, split once here; the answer quotes per question)."""

    query: str
    routing: Routing
    hits: list[RankedHit]
    parts: list[Question]
    timings_ms: dict[str, float] = field(default_factory=dict)
    vector: np.ndarray | None = None  # the query vector searched with (None: a message retrieved question by question)
    pools: list[Pool] = field(default_factory=list)  # the default strategy's candidate pool of each question, where built


@dataclass
class ProductRetrieval:
    """One product's part of an answer given by product: the product, its router probability p_j and its own
    retrieval (the question searched in that product alone)."""

    domain: str
    probability: float
    retrieval: Retrieval
