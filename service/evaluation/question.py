"""One question through one strategy: retrieve, score the ranking, answer and judge; the record that is stored.

:func:`evaluate_question` is what :func:`service.evaluation.runner.run_job` calls for every question and
strategy of a job; the metric groups' scoring functions are :mod:`.groups`'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from service.evaluation import ragxplain, wixqa
from service.evaluation.groups import GROUPS, Scoring, judged_metric_names, metric_groups, needs_answers, needs_judge
from service.evaluation.judges import Judge, Outcome
from service.evaluation.spec import JobQuestion, JobSpec
from service.evaluation.summary import kind_of
from service.schemas import EvalSpec, MetricGroup, Strategy

if TYPE_CHECKING:
    from service.pipeline import Pipeline
    from service.retrieval.results import Prepared, Retrieval


class EvaluationError(ValueError):
    """A job that cannot run as asked (e.g. judge metrics without a judge)."""


# What a missing answer scores in each judged metric: a failure of the system, never of the judge.
NO_ANSWER_SCORES = {
    "relevancy": 0.0,
    "faithfulness": 0.0,
    "factuality": 0.0,
    "completeness": 0.0,
    "hallucination": 0.0,
    "irrelevance": 1.0,
    **{m: 0.0 for m in ragxplain.METRICS},
}


def _no_answer(record: dict[str, Any], names: Iterable[str], mode: str) -> None:
    """Score the judged metrics of a question the system did not answer (RAGEval: every key point missing)."""
    for n in names:
        record["metrics"][n] = NO_ANSWER_SCORES.get(n, 0.0)
        record["outcomes"][n] = {
            "value": record["metrics"][n],
            "explanation": f"no answer (answer_mode {mode}): scored as a failure of the system",
            "error": None,
            "kind": None,
            "calls": 0,
        }


def _record(q: JobQuestion, position: int, strategy: Strategy, ret: Retrieval) -> dict[str, Any]:
    """A question's record before scoring: the question, the ranking and the routing."""
    record: dict[str, Any] = {
        "qid": q.qid,
        "query": q.query,
        "domains": q.domains,
        "kind": kind_of(q),
        "strategy": strategy,
        "position": position,
        "gold_doc_ids": q.gold_doc_ids,
        "ranking": [
            {
                "doc_id": h.passage.doc_id,
                "domain": h.passage.domain,
                "title": h.passage.title,
                "score": round(h.score, 6),
                "unified_score": round(h.unified_score, 6),
            }
            for h in ret.hits
        ],
        "active_domains": ret.routing.active_domains,
        "fallback": ret.routing.fallback,
        "probabilities": ret.routing.probabilities,
        "metrics": {},
        "outcomes": {},
    }
    detail = ret.routing.selector
    if detail is not None and detail.model_fields_set:
        record["selector"] = {**detail.model_dump(exclude={"errors"}), "errors": list((detail.errors or {}).values())[:3]}
    return record


def evaluate_question(
    pipeline: Pipeline,
    judge: Judge | None,
    spec: JobSpec,
    q: JobQuestion,
    position: int,
    strategy: Strategy,
    prepared: Prepared | None,
    key_points: Callable[[], Outcome] | None = None,
) -> dict[str, Any]:
    """Retrieve (and answer, and judge) one question with one strategy; returns its record."""
    top_k = spec.top_k
    seed = (spec.seed + position) if spec.seed is not None else None
    t0 = time.perf_counter()
    ret = pipeline.retrieve(
        q.query,
        top_k=top_k,
        seed=seed,
        gate_mode=spec.gate,
        strategy=strategy,
        prepared=prepared,
        domains=spec.domains,
        allowed=None if spec.scope is None else frozenset(spec.scope),  # the products of the API key that made the job
    )
    record = _record(q, position, strategy, ret)
    scoring = Scoring(record, q, ret.hits, ret.routing.active_domains, top_k, judge=judge, key_points=key_points)
    groups = [GROUPS[g] for g in metric_groups(spec)]
    for g in groups:
        if g.score_ranking is not None:
            g.score_ranking(scoring)
    if needs_answers(spec):
        _score_answer(pipeline, spec, record, scoring, ret, judge)
    record["ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return record


def _score_answer(
    pipeline: Pipeline,
    spec: EvalSpec,
    record: dict[str, Any],
    scoring: Scoring,
    ret: Retrieval,
    judge: Judge | None,
) -> None:
    """Answer through the configured answering path and score it; a missing answer scores 0 in every judged
    metric (a failure of the system) without asking the judge."""
    ans = pipeline.answer_retrieval(ret, context_passages=spec.top_k)
    answer, mode = ans.text, ans.mode.value
    record.update(
        answer=answer,
        answer_mode=mode,
        answer_error=ans.error,
        generate_ms=ans.timings_ms["answer"],
        confidence=None if ans.confidence is None else ans.confidence.__dict__,
    )
    scoring.answer, scoring.answer_mode, scoring.answer_ms = answer, mode, ans.timings_ms["answer"]
    groups = [GROUPS[g] for g in metric_groups(spec)]
    if needs_judge(spec) and judge is None:
        raise EvaluationError("judge metrics need a judge")
    if not answer and needs_judge(spec):
        _no_answer(record, [n for n in judged_metric_names(spec) if n != "context_recall"], mode)
        if MetricGroup.WIXQA in metric_groups(spec):
            assert judge is not None
            record["metrics"].update(wixqa.lexical(answer, scoring.query.answer))
            scoring.outcome("context_recall", wixqa.context_recall(judge, scoring.query.answer, scoring.context), judge)
        groups = [g for g in groups if not g.needs_judge]
    for g in groups:
        if g.score_answer is not None:
            g.score_answer(scoring)
