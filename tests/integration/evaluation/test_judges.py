"""Judge plumbing: retries, structured-output parsing, parse and call failures counted (never scored 0),
against a real OpenAI-protocol HTTP server with scripted replies, and against the real embedded model."""

from __future__ import annotations

import itertools

import pytest

from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge
from service.evaluation.mkpqa import faithfulness, relevancy
from service.evaluation.runner import create_job, run_job
from service.generation.openai_llm import OpenAILLM
from service.retrieval.strategies import StrategyName
from service.schemas import EvalQuery, EvalSpec, MetricGroup
from tests.scripted_llm import ScriptedServer
from tests.utils import free_port, pipeline_with, present


@pytest.fixture()
def scripted():
    servers = []

    def make(reply):
        s = ScriptedServer(reply)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def test_unparseable_replies_are_retried_then_counted_as_parse_failures(scripted):
    server = scripted(lambda prompt: "I would say it is quite relevant, maybe seven.")
    judge = Judge(server.llm("junk-model"), retries=2)
    out = relevancy(judge, "How do I undo a commit?", "Use git revert.")
    assert out.value is None and out.kind == "parse" and out.error is not None and "unparseable" in out.error
    assert out.calls == 3 and len(server.prompts) == 3  # one try and two retries
    assert judge.info() == {"model": "openai:junk-model", "requests": 1, "llm_calls": 3, "parse_failures": 1, "call_failures": 0, "retries": 2}


def test_a_retry_that_parses_succeeds(scripted):
    replies = itertools.chain(["no json here", 'Sure: {"score": 11}', '{"score": 7, "reason": "answers it"}'], itertools.repeat("{}"))
    server = scripted(lambda prompt: next(replies))
    judge = Judge(server.llm(), retries=2)
    out = relevancy(judge, "q", "a")
    assert out.value == 7.0 and out.explanation == "answers it" and out.calls == 3 and out.kind is None
    assert judge.stats["parse_failures"] == 0 and judge.stats["retries"] == 2


def test_unreachable_judge_is_a_call_failure():
    judge = Judge(OpenAILLM(f"http://127.0.0.1:{free_port()}/v1", "down"), retries=1, timeout_s=2)
    out = relevancy(judge, "q", "a")
    assert out.value is None and out.kind == "call" and judge.stats["call_failures"] == 1


def test_faithfulness_two_steps(scripted):
    def reply(prompt: str) -> str:
        if prompt.startswith("Break the answer"):
            return '{"statements": ["Revert makes a new commit.", "Revert deletes history.", "It is safe."]}'
        return '{"verdicts": [{"statement": 1, "verdict": 1}, {"statement": 2, "verdict": 0}, {"statement": 3, "verdict": 1}]}'

    judge = Judge(scripted(reply).llm())
    out = faithfulness(judge, "undo?", "Revert makes a new commit. It deletes history.", [("git-revert", "Revert adds a commit.")])
    assert out.value == pytest.approx(2 / 3) and out.calls == 2
    assert out.detail["verdicts"] == [1, 0, 1] and out.explanation is not None and "Revert deletes history." in out.explanation


def test_missing_answer_is_skipped_not_scored():
    judge = Judge(OpenAILLM("http://127.0.0.1:9/v1", "never-called"))
    out = relevancy(judge, "q", None)
    assert out.value is None and out.kind == "skipped" and judge.stats["llm_calls"] == 0


def test_job_counts_judge_failures_in_its_summary(demo_pipeline, scripted, tmp_path):
    """Half the relevancy replies are junk: the summary's mean uses the parsed ones and counts the rest."""

    def reply(prompt: str) -> str:
        if prompt.startswith("You are an impartial judge"):
            return '{"score": 9}' if "contacts" in prompt else "no idea"
        if prompt.startswith("Break the answer"):
            return '{"statements": ["A statement."]}'
        if prompt.startswith("Your task is to judge the faithfulness"):
            return '{"verdicts": [{"statement": 1, "verdict": 1}]}'
        return "Answer from the sources [1]."  # generation

    server = scripted(reply)
    # The scripted answer is not grounded in the sources; keep it generative for this plumbing test.
    pipeline = pipeline_with(demo_pipeline, llm=server.llm("gen"), settings=demo_pipeline.settings.model_copy(update={"min_grounding": 0.0}))
    store = JobStore(tmp_path / "jobs.sqlite")
    queries = [
        EvalQuery(qid="q1", query="How do I import contacts from a spreadsheet?", domains=["orbit"], gold_doc_ids=["orbit/import-export#002"]),
        EvalQuery(qid="q2", query="How long do sessions last?", domains=["beacon"], gold_doc_ids=["x"]),
    ]
    spec = EvalSpec(strategies=[StrategyName.MKPQA], metrics=[MetricGroup.RETRIEVAL, MetricGroup.ANSWER], top_k=5, gate="deterministic", seed=None)
    job = create_job(store, spec, queries, "hand")
    summary = present(run_job(pipeline, Judge(server.llm("judge-model"), retries=1, concurrency=1), store, job))
    assert summary["results"]["mkpqa"]["all"]["relevancy"] == 9.0
    assert summary["failures"]["mkpqa"] == {"relevancy": {"parse": 1}}
    assert summary["results"]["mkpqa"]["all"]["faithfulness"] == 1.0
    assert summary["judge"]["model"] == "openai:judge-model"
    records = store.results(job)
    assert records[1].outcomes["relevancy"].kind == "parse" and records[1].metrics["relevancy"] is None
    assert all(r.answer_mode == "generative" for r in records)


def test_embedded_model_as_judge_gives_a_score_or_a_counted_failure(embedded_llm):
    """SmolLM2-135M is a weak judge; whatever it says must be a 1-10 score or a counted failure."""
    judge = Judge(embedded_llm, retries=1, timeout_s=60)
    out = relevancy(judge, "How do I undo the last commit in git?", "Run git reset --soft HEAD~1 to undo the last commit.")
    assert (out.value is not None and 1 <= out.value <= 10) or out.kind == "parse"
    assert judge.stats["parse_failures"] == (1 if out.value is None else 0)
    assert present(judge.name).startswith("transformers:")
