"""Fitting the extractive-answer policy on labelled questions with reference answers.

Every question is retrieved once through the serving path; then each policy of a small grid (candidate
passages, weight of the question's words in the choice, sentence margin, continuation into the next ranked
passage of the same page) answers it, and the policy with the best mean token F1 against the reference
answers is stored (``answer.json`` beside the abstention model, see
:mod:`service.generation.answer_policy`). Fit on training questions; measure on questions kept apart
(``benchmarks/answer_quality.py``).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.config import Settings
from service.evaluation.wixqa import token_f1
from service.generation.answer_policy import WHOLE, AnswerPolicy, policy_path, save_policy
from service.generation.extractive import SentenceVectors, by_policy
from service.queries import LabelledQuery
from service.retrieval.passage import RankedHit
from training.page_prior import unseen
from training.versions import fitted_on, save_beside_router

SOURCES = (1, 2, 3, 5)
TERM_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
MARGINS = (0.05, 0.1, 0.2, 0.3, WHOLE)
CONTINUE_GAPS: tuple[float | None, ...] = (None, 0.0, 0.05, 0.1)
_CITATION = re.compile(r"\s*\[\d{1,2}\]")


@dataclass(frozen=True)
class Case:
    """One fitting question: its text, vector, ranking and reference answer."""

    query: str
    vector: np.ndarray
    hits: list[RankedHit]
    reference: str


@dataclass(frozen=True)
class PolicyReport:
    """The fitted policy, where it was stored, and its mean scores on the fitting questions."""

    policy: AnswerPolicy
    path: str | None
    scores: dict[str, Any]


def collect_cases(pipeline, queries: Sequence[LabelledQuery], *, top_k: int = 5) -> list[Case]:  # noqa: ANN001
    """Retrieve every question with a reference answer through the serving path (default strategy,
    deterministic gate)."""
    usable = [q for q in queries if q.answer]
    cases: list[Case] = []
    for start in range(0, len(usable), 32):
        window = usable[start : start + 32]
        for q, prep in zip(window, pipeline.prepare_many([q.query for q in window]), strict=True):
            with unseen(pipeline, q.gold_doc_ids):  # the page prior counted it: ranked as a new question
                ret = pipeline.retrieve(q.query, top_k=top_k, gate_mode="deterministic", prepared=prep)
            if ret.hits:
                cases.append(Case(q.query, prep.vector, ret.hits, q.answer or ""))
    return cases


def grid(top_k: int) -> Iterable[AnswerPolicy]:
    """The candidate policies, simplest first (ties keep the first)."""
    for sources, gap, margin, weight in itertools.product(
        [s for s in SOURCES if s <= top_k], CONTINUE_GAPS, sorted(MARGINS, reverse=True), TERM_WEIGHTS
    ):
        yield AnswerPolicy(sources=sources, term_weight=weight, margin=margin, continue_gap=gap)


def answer_text(policy: AnswerPolicy, case: Case, vectors: SentenceVectors | None, max_words: int) -> str:
    """The policy's answer to one case, without citation markers."""
    text = by_policy(case.query, case.vector, case.hits, vectors, policy, max_words=max_words).text or ""
    return _CITATION.sub(" ", text)


def mean_f1(policy: AnswerPolicy, cases: Sequence[Case], vectors: SentenceVectors | None, max_words: int) -> float:
    """Mean token F1 of the policy's answers against the references."""
    return float(np.mean([token_f1(answer_text(policy, c, vectors, max_words), c.reference) for c in cases]))


def fit_policy(cases: Sequence[Case], vectors: SentenceVectors | None, *, top_k: int = 5, max_words: int = 400) -> AnswerPolicy:
    """The grid policy with the best mean token F1 on ``cases`` (sentence margins need ``vectors``)."""
    if not cases:
        raise ValueError("fitting the answer policy needs questions with reference answers")
    best: tuple[float, AnswerPolicy] | None = None
    for policy in grid(top_k):
        if vectors is None and not policy.whole:
            continue
        f1 = mean_f1(policy, cases, vectors, max_words)
        if best is None or f1 > best[0] + 1e-9:
            best = (f1, policy)
    assert best is not None
    return best[1]


def fit_answer_policy(
    settings: Settings,
    queries: Sequence[LabelledQuery],
    *,
    save: bool = True,
    pipeline=None,
    top_k: int = 5,  # noqa: ANN001
) -> PolicyReport:
    """Fit the policy for the active versions of ``settings``' home on ``queries`` (with reference answers)
    and (``save``) store it beside the abstention model. ``pipeline``: an open pipeline of that home."""
    from service.evaluation.answers import rouge_l
    from service.loading import load_pipeline

    t0 = time.perf_counter()
    own = pipeline is None
    pipeline = pipeline or load_pipeline(settings, with_llm=False)
    try:
        cases = collect_cases(pipeline, queries, top_k=top_k)
        vectors = pipeline.answerer.extractor.vectors
        max_words = pipeline.settings.extractive_max_words
        policy = fit_policy(cases, vectors, top_k=top_k, max_words=max_words)
        texts = [answer_text(policy, c, vectors, max_words) for c in cases]
        versions = pipeline.versions
    finally:
        if own:
            pipeline.close()
    scores = {
        "questions": len(cases),
        "answer_f1": round(float(np.mean([token_f1(t, c.reference) for t, c in zip(texts, cases, strict=True)])), 4),
        "answer_rouge_l": round(float(np.mean([rouge_l(t, c.reference) for t, c in zip(texts, cases, strict=True)])), 4),
    }
    policy.fit = {"on_fit_questions": scores, **fitted_on(versions, t0)}
    path = save_beside_router(settings.home_dir, versions, policy_path, lambda t: save_policy(policy, t)) if save else None
    return PolicyReport(policy=policy, path=path, scores=scores)
