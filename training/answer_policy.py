"""Fitting the extractive-answer policy on labelled questions with reference answers.

Every question is retrieved once through the serving path; then each policy of a small grid (candidate
passages, weight of the question's words in the choice, sentence margin, continuation into the next ranked
passage of the same page) answers it, and the policy with the best mean token F1 against the reference
answers is stored (``answer.json`` beside the abstention model, see
:mod:`service.generation.answer_policy`). It serves only when :func:`training.fallback.decide` keeps it: enough
questions, and its cross-fitted mean F1 (each question answered by the policy chosen on the other folds) no lower
than the unfitted rule's. Fit on training questions; measure on questions kept apart (``benchmarks/answer_quality.py``).
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
from service.generation.extractive import ExtractConfig, SentenceVectors, by_meaning, by_policy, by_terms
from service.queries import LabelledQuery
from service.retrieval.passage import RankedHit
from training.fallback import decide
from training.guard import assigned_folds, permuted_folds
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
    pipeline.settle()
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


def f1_matrix(policies: Sequence[AnswerPolicy], cases: Sequence[Case], vectors: SentenceVectors | None, max_words: int) -> np.ndarray:
    """Token F1 of each policy's answer (rows) to each case (columns); a text several policies quote for a case is
    scored once."""
    matrix = np.zeros((len(policies), len(cases)))
    for j, case in enumerate(cases):  # case by case: the texts whose terms service.text.terms caches stay few
        scored: dict[str, float] = {}
        for i, policy in enumerate(policies):
            text = answer_text(policy, case, vectors, max_words)
            if text not in scored:
                scored[text] = token_f1(text, case.reference)
            matrix[i, j] = scored[text]
    return matrix


def usable(top_k: int, vectors: SentenceVectors | None) -> list[AnswerPolicy]:
    """The grid's policies that can answer here (sentence margins need ``vectors``), simplest first."""
    return [pol for pol in grid(top_k) if vectors is not None or pol.whole]


def best_row(matrix: np.ndarray, columns: np.ndarray | None = None) -> int:
    """The row with the best mean F1 over ``columns`` (all: None); ties keep the first (the simplest policy)."""
    means = matrix.mean(axis=1) if columns is None else matrix[:, columns].mean(axis=1)
    return int(np.flatnonzero(means >= means.max() - 1e-9)[0])


def cross_fitted_f1(matrix: np.ndarray, *, folds: int = 5, seed: int = 0) -> float:
    """Mean F1 over the cases, each answered by the policy chosen on the other folds."""
    scores = np.zeros(matrix.shape[1])
    for train, test in assigned_folds(permuted_folds(matrix.shape[1], folds, np.random.default_rng(seed))):
        scores[test] = matrix[best_row(matrix, train), test]
    return float(scores.mean())


def default_f1(cases: Sequence[Case], vectors: SentenceVectors | None, config: ExtractConfig) -> np.ndarray:
    """Token F1 of the unfitted rule's answer (FEDQA_EXTRACTIVE_*: no answer.json) to each case."""
    out = []
    for c in cases:
        got = by_meaning(c.vector, c.hits, vectors, config) if vectors is not None else by_terms(c.query, c.hits, max_sources=config.max_sources)
        out.append(token_f1(_CITATION.sub(" ", got.text or ""), c.reference))
    return np.asarray(out, dtype=np.float64)


def fit_policy(cases: Sequence[Case], vectors: SentenceVectors | None, *, top_k: int = 5, max_words: int = 400) -> AnswerPolicy:
    """The grid policy with the best mean token F1 on ``cases`` (sentence margins need ``vectors``)."""
    if not cases:
        raise ValueError("fitting the answer policy needs questions with reference answers")
    policies = usable(top_k, vectors)
    return policies[best_row(f1_matrix(policies, cases, vectors, max_words))]


def fit_answer_policy(
    settings: Settings,
    queries: Sequence[LabelledQuery],
    *,
    save: bool = True,
    pipeline=None,  # noqa: ANN001
    top_k: int = 5,
    folds: int = 5,
    seed: int = 0,
) -> PolicyReport:
    """Fit the policy for the active versions of ``settings``' home on ``queries`` (with reference answers) and
    choose it or the unfitted rule by :func:`training.fallback.decide` (mean answer F1, the fitted policy's
    cross-fitted, at least ``settings.decision_min_questions`` questions); (``save``) store it beside the
    abstention model with the verdict (``fit.decision``: a policy the verdict does not keep is stored, not served).
    ``pipeline``: an open pipeline of that home."""
    from service.evaluation.answers import rouge_l
    from service.loading import load_pipeline

    t0 = time.perf_counter()
    own = pipeline is None
    pipeline = pipeline or load_pipeline(settings, with_llm=False)
    try:
        cases = collect_cases(pipeline, queries, top_k=top_k)
        if not cases:
            raise ValueError("fitting the answer policy needs questions with reference answers")
        vectors = pipeline.answerer.extractor.vectors
        config = pipeline.answerer.extractor.config
        max_words = pipeline.settings.extractive_max_words
        policies = usable(top_k, vectors)
        matrix = f1_matrix(policies, cases, vectors, max_words)
        policy = policies[best_row(matrix)]
        decision = decide(
            len(cases),
            settings.decision_min_questions,
            "answer F1",
            lambda: (cross_fitted_f1(matrix, folds=folds, seed=seed), float(default_f1(cases, vectors, config).mean())),
            folds=folds,
        )
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
    policy.fit = {"decision": decision.to_json(), "on_fit_questions": scores, **fitted_on(versions, t0)}
    path = save_beside_router(settings.home_dir, versions, policy_path, lambda t: save_policy(policy, t)) if save else None
    return PolicyReport(policy=policy, path=path, scores=scores)
