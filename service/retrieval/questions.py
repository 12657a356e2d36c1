"""A message that asks several questions at once ("How do I strip HTML from a string? And, how do I report
a bug in Debian?"), which is what a cross-product question usually is.

The default strategy routes and searches each question on its own: one question's words no longer pull
the other's search towards the wrong product, and each question is routed to its own product. The
rankings are then interleaved: every question's first passage before any question's second, and within
a rank by unified score, each passage once. The paper's strategies (uis, rfs, mkpqa, lfs) search the
message as one query, as in the paper.

Retrieval splits a message once (:func:`service.text.split_questions`, the rule) and hands its questions on as
:attr:`Retrieval.parts <service.retrieval.results.Retrieval.parts>`, with every strategy: the answer quotes per
question from them and never splits again (:func:`questions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from service.retrieval.passage import RankedHit, descending
from service.retrieval.results import Question, Retrieval
from service.retrieval.strategies.base import QuestionRouting, StrategyDetail
from service.schemas import Routing


def questions(message: str, texts: Sequence[str], vector: np.ndarray | None) -> list[Question]:
    """:attr:`Retrieval.parts <service.retrieval.results.Retrieval.parts>` of ``message`` searched as one text, from its
    questions ``texts`` (:func:`service.text.split_questions`): the message itself with ``vector`` (the query vector
    searched with) when it asks one thing, else each question without a vector (the answer embeds it)."""
    return [Question(message, vector)] if len(texts) == 1 else [Question(q) for q in texts]


def interleave(rankings: Sequence[Sequence[RankedHit]], top_k: int) -> list[RankedHit]:
    """Rank r of every ranking before rank r + 1 of any; within a rank by the merge's order key (U, or the fused rank score), then raw score; each
    passage once (at its first place), with its rank in its question's ranking as the feature ``question_rank`` and its
    ``rank_score`` at most the one above it (:func:`~service.retrieval.passage.descending`)."""
    out: list[RankedHit] = []
    seen: set[tuple[str, str]] = set()  # (domain, doc_id): a doc_id is unique within its domain
    for rank in range(max((len(r) for r in rankings), default=0)):
        tier = sorted((r[rank] for r in rankings if rank < len(r)), key=lambda h: (-h.order_key, -h.score, h.passage.doc_id))
        for hit in tier:
            key = (hit.passage.domain, hit.passage.doc_id)
            if key not in seen and len(out) < top_k:
                seen.add(key)
                out.append(replace(hit, features=replace(hit.features, question_rank=rank + 1)))
    return descending(out)


def joint_routing(parts: Sequence[str], routings: Sequence[Routing]) -> Routing:
    """One routing for the message: each domain's highest probability and activation over its questions, the
    union of their domains (in order), and each question's own routing under ``selector.questions``."""
    first = routings[0]
    domains = list(first.probabilities)
    active = list(dict.fromkeys(d for r in routings for d in r.active_domains))
    return first.model_copy(
        update={
            "probabilities": {d: max(r.probabilities[d] for r in routings) for d in domains},
            "activation": {d: max(r.activation.get(d, 0.0) for r in routings) for d in domains},
            "threshold": min(r.threshold for r in routings),
            "active_domains": active,
            "fallback": any(r.fallback for r in routings),
            "selector": StrategyDetail(
                questions=[
                    QuestionRouting(query=q, active_domains=r.active_domains, probabilities=r.probabilities, selector=r.selector)
                    for q, r in zip(parts, routings, strict=True)
                ]
            ),
        }
    )


def joint_retrieval(query: str, parts: Sequence[str], retrievals: Sequence[Retrieval], top_k: int) -> Retrieval:
    """The message's retrieval from its questions' (timings: each stage summed over the questions; ``parts``: each
    question with the vector it was searched with)."""
    timings: dict[str, float] = {}
    for r in retrievals:
        for k, v in r.timings_ms.items():
            timings[k] = round(timings.get(k, 0.0) + v, 3)
    return replace(
        retrievals[0],
        query=query,
        routing=joint_routing(parts, [r.routing for r in retrievals]),
        hits=interleave([r.hits for r in retrievals], top_k),
        parts=[Question(q, r.vector, tuple((h.passage.domain, h.passage.doc_id) for h in r.hits)) for q, r in zip(parts, retrievals, strict=True)],
        timings_ms=timings,
        vector=None,  # no one vector stands for the message
        pools=[p for r in retrievals for p in r.pools],
    )
