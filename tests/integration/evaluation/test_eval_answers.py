"""Evaluation of the configured answering path: the ``answers`` metrics (F1, ROUGE-L, BLEU, abstention,
false refusals, latency) per strategy and answer mode, and a missing answer scored as a failure of the system."""

from __future__ import annotations

import socket

import pytest

from service.evaluation.answers import is_out_of_scope, rouge_l, scores
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge
from service.evaluation.runner import create_job, run_job
from service.evaluation.wixqa import lexical
from service.generation.openai_llm import OpenAILLM
from service.pipeline import Pipeline
from service.schemas import EvalQuery, EvalSpec
from tests.conftest import make_settings
from tests.scripted_llm import ScriptedServer
from tests.utils import present

IN_SCOPE = [
    EvalQuery(
        qid="q1",
        query="How do I import contacts from a spreadsheet?",
        domains=["orbit"],
        gold_doc_ids=["orbit/import-export#002"],
        answer="Go to Contacts > Import, choose Contacts, upload your CSV or XLSX file and map the columns.",
    ),
    EvalQuery(
        qid="q2",
        query="How is the CSAT score calculated?",
        domains=["relay"],
        gold_doc_ids=["x"],
        answer="The satisfaction score is the percentage of Good ratings out of all ratings in the period.",
    ),
]
OOS = [EvalQuery(qid="o1", query="What is the meaning of life?", domains=[], gold_doc_ids=[], kind="oos", answer="42.")]


def test_scores_count_missing_and_refused_answers_as_failures():
    ok = scores("Refunds take five days [1].", "extractive", "Refunds take five days.", out_of_scope=False, answer_ms=3.0)
    assert ok["answer_f1"] == pytest.approx(1.0) and ok["false_refusal"] == 0.0 and ok["abstained"] is None
    missing = scores(None, "none", "Refunds take five days.", out_of_scope=False, answer_ms=1.0)
    assert missing["answer_f1"] == missing["answer_rouge_l"] == missing["answer_bleu"] == 0.0
    refused = scores("The documentation does not cover this.", "not_covered", "Refunds.", out_of_scope=False, answer_ms=1.0)
    assert refused["false_refusal"] == 1.0 and refused["answer_f1"] == 0.0
    oos = scores("The documentation does not cover this.", "not_covered", "42.", out_of_scope=True, answer_ms=1.0)
    assert oos["abstained"] == 1.0 and oos["answer_f1"] is None and oos["false_refusal"] is None
    assert lexical(None, "Refunds take five days.")["token_f1"] == 0.0  # wixqa: missing answer = 0, not skipped
    assert lexical("anything", None)["token_f1"] is None
    assert rouge_l("the cat sat on the mat", "the cat sat") == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert is_out_of_scope(OOS[0]) and not is_out_of_scope(IN_SCOPE[0])


def test_answers_group_reports_per_strategy_and_answer_mode(demo_pipeline, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    spec = EvalSpec.model_validate({"strategies": ["fused", "uis"], "metrics": ["retrieval", "answers"], "top_k": 5})
    job = create_job(store, spec, IN_SCOPE + OOS, "hand")
    summary = present(run_job(demo_pipeline, None, store, job))  # no judge needed (mkpqa is left out: its gate
    # searches one product for the CSAT question, whose router probability is low, and may rightly refuse it)
    for s in ("fused", "uis"):
        a = summary["answers"][s]
        assert a["all"]["questions"] == 3 and a["all"]["n_answer_f1"] == 2
        assert 0.2 < a["all"]["answer_f1"] <= 1.0 and a["all"]["answer_rouge_l"] > 0.2
        assert a["all"]["false_refusal_rate"] == 0.0  # the in-scope questions are answered
        assert a["all"]["abstention_rate"] == 1.0 and a["all"]["n_abstained"] == 1  # the demo's fitted model refuses o1
        assert a["all"]["answer_ms"]["p95"] >= a["all"]["answer_ms"]["p50"] > 0
        assert set(a["by_answer_mode"]) == {"extractive", "not_covered"}
    assert summary["n_by_group"]["oos"] == 1
    assert summary["results"]["fused"]["oos"]["acc_at_top1"] is None  # no gold: not scored
    assert summary["answer_modes"]["fused"] == {"extractive": 2, "not_covered": 1}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_missing_answer_scores_zero_and_is_not_a_judge_failure(demo_pipeline, tmp_path):
    """The LLM is down and FEDQA_ANSWER_FALLBACK=none: no answer. Judged metrics score 0 (the system failed),
    the judge is not asked about it; a judge reply that never parses is still left out and counted."""

    def reply(prompt: str) -> str:
        return "not json" if "CSAT" in prompt else '{"score": 8}'

    server = ScriptedServer(reply)
    pipeline = Pipeline(
        make_settings(demo_pipeline.settings.home_dir, answer_fallback="none", llm_timeout_s=2),
        router=demo_pipeline.router,
        encoder=demo_pipeline.encoder,
        store=demo_pipeline.store,
        llm=OpenAILLM(f"http://127.0.0.1:{_closed_port()}/v1", "down"),
    )
    try:
        store = JobStore(tmp_path / "jobs.sqlite")
        spec = EvalSpec.model_validate({"strategies": ["mkpqa"], "metrics": ["answer", "answers"], "top_k": 5})
        job = create_job(store, spec, IN_SCOPE[:1], "hand")
        summary = present(run_job(pipeline, Judge(server.llm("judge"), retries=0, concurrency=1), store, job))
    finally:
        server.close()
    record = store.results(job)[0]
    assert record.answer is None and record.answer_mode == "none"
    assert record.metrics["relevancy"] == 0.0 and record.metrics["faithfulness"] == 0.0
    assert record.outcomes["relevancy"].kind is None
    assert summary["results"]["mkpqa"]["all"]["relevancy"] == 0.0 and summary["counts"]["mkpqa"]["all"]["relevancy"] == 1
    assert summary["failures"]["mkpqa"] == {}
    assert server.prompts == []  # the judge was not asked about a missing answer
    assert summary["answers"]["mkpqa"]["all"]["answer_f1"] == 0.0
    assert summary["answers"]["mkpqa"]["by_answer_mode"]["none"]["questions"] == 1
