"""Evaluation asks as ``/ask`` answers (issue 30): each evaluated question is an :class:`AskRequest` through
:mod:`service.ask`, so a record's ranking and routing are those ``service.ask.answer`` gives for the same request, its
answer is the one ``/ask`` returns (an answer given by product included, judged against the passages it was given
from), and a ranking-only evaluation answers nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.ask import answer
from service.demo import QUERIES
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge
from service.evaluation.record import QuestionRecord
from service.evaluation.runner import create_job, run_job
from service.pipeline import Pipeline
from service.retrieval.strategies import StrategyName
from service.schemas import AskRequest, EvalQuery, EvalSpec
from tests.scripted_llm import ScriptedServer
from tests.utils import ambiguous_question, pipeline_with, present

TOP_K = 5


def _request(query: str, strategy: str, *, generate: bool) -> AskRequest:
    """The request a user sends for what a job with TOP_K and the deterministic gate evaluates."""
    return AskRequest(query=query, top_k=TOP_K, strategy=StrategyName(strategy), gate="deterministic", generate=generate)


def _records(pipeline: Pipeline, db: Path, queries: list[EvalQuery], strategies: list[str], metrics: list[str]) -> list[QuestionRecord]:
    """The records of a job run on ``pipeline`` (stored in ``db``)."""
    store = JobStore(db)
    spec = EvalSpec.model_validate({"strategies": strategies, "metrics": metrics, "top_k": TOP_K})
    job = create_job(store, spec, queries, "hand")
    present(run_job(pipeline, None, store, job))
    return store.results(job)


def _demo_questions(n: int) -> list[EvalQuery]:
    qs = [EvalQuery.model_validate_json(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return qs[:: len(qs) // n][:n]


def _ranking(resp_sources: Any) -> list[tuple[str, str, str]]:
    return [(s.doc_id, s.domain, s.title) for s in resp_sources]


def test_a_record_ranks_and_routes_as_ask_does(demo_pipeline, tmp_path):
    records = _records(demo_pipeline, tmp_path / "jobs.sqlite", _demo_questions(6), ["mkpqa", "uis"], ["retrieval"])
    assert len(records) == 12 and {r.strategy for r in records} == {"mkpqa", "uis"}
    for r in records:
        resp = answer(demo_pipeline, _request(r.query, r.strategy, generate=False))
        assert [(h.doc_id, h.domain, h.title) for h in r.ranking] == _ranking(resp.sources)
        # the scores of a batch's query vectors (evaluation embeds 32 questions at once) and of one: equal to ~1e-6
        assert [h.score for h in r.ranking] == pytest.approx([s.score for s in resp.sources], abs=1e-5)
        assert [h.unified_score for h in r.ranking] == pytest.approx([s.unified_score for s in resp.sources], abs=1e-5)
        assert r.active_domains == resp.routing.active_domains and r.fallback == resp.routing.fallback
        assert r.probabilities == pytest.approx(resp.routing.probabilities, abs=1e-5)


def test_an_evaluated_answer_is_the_answer_ask_gives_by_product_included(demo_pipeline, tmp_path):
    ambiguous, clear = ambiguous_question(demo_pipeline), "How do I export my data?"
    queries = [EvalQuery(qid="ambiguous", query=ambiguous), EvalQuery(qid="clear", query=clear)]
    records = _records(demo_pipeline, tmp_path / "jobs.sqlite", queries, ["fused", "mkpqa"], ["retrieval", "answers"])
    assert len(records) == 4
    for r in records:
        resp = answer(demo_pipeline, _request(r.query, r.strategy, generate=True))
        assert (r.answer, r.answer_mode, r.answer_error) == (resp.answer, resp.answer_mode, resp.error)
        assert present(r.confidence).covered == present(resp.confidence).covered
        assert present(r.generate_ms) > 0 and r.metrics["answer_ms"] == r.generate_ms
        # the ranking scored is the merged one, also when the answer's sources are the products' passages in turn
        ranking_only = answer(demo_pipeline, _request(r.query, r.strategy, generate=False))
        assert [h.doc_id for h in r.ranking] == [s.doc_id for s in ranking_only.sources]
    by_product = next(r for r in records if r.qid == "ambiguous" and r.strategy == "fused")
    assert by_product.answer_mode == "by_product"  # what /ask answers, not one product's answer to the merged ranking
    assert next(r for r in records if r.qid == "clear" and r.strategy == "fused").answer_mode == "extractive"


class _NoAnswers:
    """An answering component that must not be called: a ranking-only evaluation answers nothing."""

    llm: Any = None  # what the pipeline's versions read

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a ranking-only evaluation asked for an answer")

    answer = stream


def test_a_ranking_only_evaluation_stops_after_retrieval(demo_pipeline, tmp_path):
    unanswering = pipeline_with(demo_pipeline, answerer=_NoAnswers())
    queries = _demo_questions(3)
    records = _records(unanswering, tmp_path / "a.sqlite", queries, ["fused", "rfs"], ["retrieval"])
    again = _records(demo_pipeline, tmp_path / "b.sqlite", queries, ["fused", "rfs"], ["retrieval"])
    assert [(r.qid, r.strategy, r.ranking, r.metrics) for r in records] == [(r.qid, r.strategy, r.ranking, r.metrics) for r in again]
    assert all("answer" not in r.stored() for r in records)
    with pytest.raises(AssertionError, match="asked for an answer"):  # the stand-in is live: answers would reach it
        _records(unanswering, tmp_path / "c.sqlite", queries[:1], ["fused"], ["answers"])


def _judge_reply(prompt: str) -> str:
    """A scripted judge: relevancy 8, one statement, supported."""
    if prompt.startswith("You are an impartial judge"):
        return '{"score": 8, "reason": "answers it"}'
    if prompt.startswith("Break the answer"):
        return '{"statements": ["One."]}'
    return '{"verdicts": [{"statement": 1, "verdict": 1}]}'


def test_an_answer_given_by_product_is_judged_against_the_passages_it_was_given_from(demo_pipeline, tmp_path):
    """Faithfulness reads the response's sources (each product's passages in turn, which its [n] cite), not the merged
    ranking's first top_k."""
    question = ambiguous_question(demo_pipeline)
    server = ScriptedServer(_judge_reply)
    try:
        store = JobStore(tmp_path / "jobs.sqlite")
        spec = EvalSpec.model_validate({"strategies": ["fused"], "metrics": ["answer"], "top_k": TOP_K})
        job = create_job(store, spec, [EvalQuery(qid="ambiguous", query=question)], "hand")
        present(run_job(demo_pipeline, Judge(server.llm("judge"), retries=0, concurrency=1), store, job))
    finally:
        server.close()
    record = store.results(job)[0]
    resp = answer(demo_pipeline, _request(question, "fused", generate=True))
    assert record.answer_mode == resp.answer_mode == "by_product" and len(resp.sources) > TOP_K
    verdicts = [p for p in server.prompts if p.startswith("Your task is to judge the faithfulness")]
    assert len(verdicts) == 1 and record.metrics["faithfulness"] == 1.0
    context = verdicts[0].split("Context:\n", 1)[1].split("\n\nStatements:", 1)[0].splitlines()
    assert len(context) == len(resp.sources)
    assert all(line.startswith(f"[{i}] ({s.title}) ") for i, (line, s) in enumerate(zip(context, resp.sources, strict=True), 1))
