"""The reranker's training and validation questions, each with the candidates of the ranking it will rerank.

Candidates come from the serving pipeline on the active index (the default strategy, deterministic gate, one
question at a time), so the cross-encoder learns to reorder what it will be given. In-scope questions keep
their gold passage (added when the ranking missed it) and hard negatives drawn from the rest of the ranking;
out-of-scope questions (the training set's, and the general ones shipped with the package) have every
candidate negative.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from service.queries import LabelledQuery
from service.reranking.params import passage_text
from service.retrieval.passage import RankedHit
from training.data.dataset import TrainingData
from training.data.general import general_negatives

BATCH = 32


@dataclass
class Candidates:
    """One question with the passages of its ranking (best first) and which of them are gold."""

    query: str
    texts: list[str]
    unified: list[float]
    gold: list[bool]
    origin: str
    doc_ids: list[str] = field(default_factory=list)

    @property
    def in_scope(self) -> bool:
        return self.origin != "out-of-scope"


def ranked_candidates(pipeline, queries: Sequence[str], *, depth: int) -> list[list[RankedHit]]:  # noqa: ANN001 - a Pipeline
    """The default strategy's top ``depth`` for each question (unreranked; one encoder pass per batch)."""
    out: list[list[RankedHit]] = []
    for start in range(0, len(queries), BATCH):
        window = list(queries[start : start + BATCH])
        for q, prep in zip(window, pipeline.prepare_many(window), strict=True):
            out.append(pipeline.retrieve(q, top_k=depth, gate_mode="deterministic", prepared=prep, question=q, rerank=False).hits)
    return out


def with_candidates(
    pipeline,  # noqa: ANN001 - a Pipeline
    questions: Sequence[LabelledQuery],
    origins: Sequence[str],
    *,
    depth: int,
    passages: dict | None,
    titles: bool = False,
) -> list[Candidates]:
    """Each question with its served ranking. With ``passages`` (doc_id -> Passage: training) an in-scope question's
    gold passage is appended when the ranking missed it, so every in-scope question has a positive to learn from
    (and one whose gold passage is unknown is left out); without (validation) rankings are kept as served.
    ``texts`` are what the reranker reads (:func:`~service.reranking.params.passage_text`: with ``titles``, each
    passage's title before its text)."""
    rankings = ranked_candidates(pipeline, [q.query for q in questions], depth=depth)
    out = []
    for q, origin, hits in zip(questions, origins, rankings, strict=True):
        gold = set(q.gold_doc_ids)
        texts = [passage_text(h.passage.title, h.passage.text, titles=titles) for h in hits]
        c = Candidates(q.query, texts, [h.order_key for h in hits], [h.passage.doc_id in gold for h in hits], origin)
        c.doc_ids = [h.passage.doc_id for h in hits]
        if passages is not None and gold and not any(c.gold):
            first = next((d for d in q.gold_doc_ids if d in passages), None)
            if first is None:
                continue
            c.texts.append(passage_text(passages[first].title, passages[first].text, titles=titles))
            c.unified.append(0.0)
            c.gold.append(True)
            c.doc_ids.append(first)
        out.append(c)
    return out


def training_questions(data: TrainingData, *, labelled_repeat: int, limit: int, seed: int) -> tuple[list[LabelledQuery], list[str]]:
    """Expert questions (``labelled_repeat`` times), then synthetic ones up to ``limit`` in all; cross-product
    questions are left out (the service reranks each question of a message on its own)."""
    rows = [r for r in data.retriever_rows if r.origin != "cross" and r.positives]
    expert = [r for r in rows if r.origin != "synthetic"]
    synthetic = [r for r in rows if r.origin == "synthetic"]
    random.Random(f"{seed}:reranker").shuffle(synthetic)
    chosen = expert * max(1, labelled_repeat)
    chosen += synthetic[: max(0, limit - len(chosen))]
    return [LabelledQuery(r.qid, r.query, r.domains, gold_doc_ids=r.positives) for r in chosen], [r.origin for r in chosen]


def out_of_scope_questions(data: TrainingData) -> list[LabelledQuery]:
    """The training set's out-of-scope questions and the shipped general ones."""
    own = [q for q, o in zip(data.router_rows, data.router_origins, strict=True) if o == "out-of-scope"]
    return own + general_negatives()
