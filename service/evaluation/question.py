"""One question through one strategy: ask, score the ranking, score and judge the answer; the record that is stored.

:func:`evaluate_question` is what :func:`service.evaluation.runner.run_job` calls for every question and
strategy of a job. The question is answered as ``/ask`` answers it: one :class:`~service.schemas.AskRequest`
(:func:`ask_request`) through :func:`service.ask.answer_stream` (:func:`reply_to`), so an evaluation measures what a user
gets; the record (a :class:`~service.evaluation.record.QuestionRecord`) is filled from its events. The metric
groups' scoring functions are :mod:`.groups`'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.ask import answer_stream
from service.evaluation import ragxplain, wixqa
from service.evaluation.groups import GROUPS, Scoring, judged_metric_names, metric_groups, needs_answers, needs_judge
from service.evaluation.judges import Judge, Outcome
from service.evaluation.record import OutcomeRecord, QuestionRecord, RankedPassage, SelectorRecord
from service.evaluation.spec import JobQuestion, JobSpec
from service.evaluation.summary import kind_of
from service.events import DoneEvent, RetrievalEvent
from service.generation.modes import AnswerMode
from service.schemas import AskRequest, AskResponse, EvalSpec, MetricGroup, Strategy

if TYPE_CHECKING:
    from service.pipeline import Pipeline
    from service.retrieval.results import Prepared


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


def _no_answer(record: QuestionRecord, names: Iterable[str], mode: str) -> None:
    """Score the judged metrics of a question the system did not answer (RAGEval: every key point missing)."""
    for n in names:
        value = record.metrics[n] = NO_ANSWER_SCORES.get(n, 0.0)
        explanation = f"no answer (answer_mode {mode}): scored as a failure of the system"
        record.outcomes[n] = OutcomeRecord(value=value, explanation=explanation, error=None, kind=None, calls=0)


@dataclass(frozen=True)
class Reply:
    """What :mod:`service.ask` gave for one evaluated question: its retrieval (routing, sources, the typed ranking) and,
    when the request asked for an answer, the response (None: the ranking only, nothing answered)."""

    retrieval: RetrievalEvent
    response: AskResponse | None = None


def ask_request(spec: EvalSpec, q: JobQuestion, position: int, strategy: Strategy, *, generate: bool) -> AskRequest:
    """The ``/ask`` request of one question with one strategy: the spec's top_k, gate and product filter; the
    stochastic gate's seed is ``spec.seed + position``; ``generate``: answer it (False: the ranking only)."""
    seed = (spec.seed + position) if spec.seed is not None else None
    return AskRequest(query=q.query, top_k=spec.top_k, strategy=strategy, domains=spec.domains, seed=seed, gate=spec.gate, generate=generate)


def reply_to(pipeline: Pipeline, spec: JobSpec, req: AskRequest, prepared: Prepared | None) -> Reply:
    """``req`` through :func:`service.ask.answer_stream`, within the products of the API key that made the job
    (``spec.scope``), with the batch's ``prepared`` query vector and ``spec.top_k`` passages in an LLM prompt. A
    request for the ranking only stops the stream after its retrieval event: nothing is answered."""
    allowed = None if spec.scope is None else frozenset(spec.scope)
    events = answer_stream(pipeline, req, incremental=False, allowed=allowed, prepared=prepared, context_passages=spec.top_k)
    retrieved = next(events)
    if not isinstance(retrieved, RetrievalEvent):
        raise TypeError(f"answer_stream began with a {retrieved.name} event, not the retrieval")
    if not req.generate:
        events.close()
        return Reply(retrieved)
    done = [e for e in events if isinstance(e, DoneEvent)]
    return Reply(retrieved, done[-1].response)


def _record(q: JobQuestion, position: int, strategy: Strategy, retrieved: RetrievalEvent) -> QuestionRecord:
    """A question's record before scoring: the question, the ranking and the routing."""
    routing = retrieved.routing
    record = QuestionRecord(
        qid=q.qid,
        query=q.query,
        domains=q.domains,
        kind=kind_of(q),
        strategy=strategy,
        position=position,
        gold_doc_ids=q.gold_doc_ids,
        ranking=[
            RankedPassage(
                doc_id=h.passage.doc_id,
                domain=h.passage.domain,
                title=h.passage.title,
                score=round(h.score, 6),
                unified_score=round(h.unified_score, 6),
            )
            for h in retrieved.ranking
        ],
        active_domains=routing.active_domains,
        fallback=routing.fallback,
        probabilities=routing.probabilities,
        metrics={},
        outcomes={},
    )
    detail = routing.selector
    if detail is not None and detail.model_fields_set:
        record.selector = SelectorRecord.model_validate({**detail.model_dump(exclude={"errors"}), "errors": list((detail.errors or {}).values())[:3]})
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
) -> QuestionRecord:
    """Ask (the ranking only, or an answer when a metric group scores answers) and score one question with one
    strategy; returns its record."""
    t0 = time.perf_counter()
    reply = reply_to(pipeline, spec, ask_request(spec, q, position, strategy, generate=needs_answers(spec)), prepared)
    retrieved = reply.retrieval
    record = _record(q, position, strategy, retrieved)
    scoring = Scoring(record, q, retrieved.ranking, retrieved.routing.active_domains, spec.top_k, judge=judge, key_points=key_points)
    for group in [GROUPS[g] for g in metric_groups(spec)]:
        if group.score_ranking is not None:
            group.score_ranking(scoring)
    if reply.response is not None:
        _score_answer(spec, record, scoring, reply.response, judge)
    record.ms = round((time.perf_counter() - t0) * 1000, 1)
    return record


def _score_answer(spec: EvalSpec, record: QuestionRecord, scoring: Scoring, resp: AskResponse, judge: Judge | None) -> None:
    """Score the response's answer (judged from the passages it was given from, its sources); a missing answer scores
    0 in every judged metric (a failure of the system) without asking the judge. Its time is the response's from the
    ranking to the answer (``by_product``, answering per product, and ``generate``)."""
    answer, mode = resp.answer, str(resp.answer_mode)
    answer_ms = round(resp.timings_ms.get("by_product", 0.0) + resp.timings_ms.get("generate", 0.0), 3)
    record.answer, record.answer_mode, record.answer_error, record.generate_ms = answer, AnswerMode(mode), resp.error, answer_ms
    record.confidence = resp.confidence
    scoring.answer, scoring.answer_mode, scoring.answer_ms, scoring.sources = answer, mode, answer_ms, resp.sources
    groups = [GROUPS[g] for g in metric_groups(spec)]
    if needs_judge(spec) and judge is None:
        raise EvaluationError("judge metrics need a judge")
    if not answer and needs_judge(spec):
        _no_answer(record, [n for n in judged_metric_names(spec) if n != "context_recall"], mode)
        if MetricGroup.WIXQA in metric_groups(spec):
            assert judge is not None
            record.metrics.update(wixqa.lexical(answer, scoring.query.answer))
            scoring.outcome("context_recall", wixqa.context_recall(judge, scoring.query.answer, scoring.context), judge)
        groups = [g for g in groups if not g.needs_judge]
    for g in groups:
        if g.score_answer is not None:
            g.score_answer(scoring)
