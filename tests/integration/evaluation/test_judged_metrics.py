"""The judged metric groups (answer, wixqa, rageval, ragxplain) end to end: a job on demo questions, answers
and verdicts from a real OpenAI-protocol server whose replies the test scripts, and the summary's numbers
checked against what those replies imply. Also: the per-job judge cache across a stop and a resume, and the
metrics that need a reference answer skipped and counted when a question has none."""

from __future__ import annotations

import json
import re

import pytest

from service.demo import QUERIES
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge
from service.evaluation.runner import create_job, run_job
from service.evaluation.wixqa import reference_sentences
from service.pipeline import Pipeline
from service.retrieval.strategies import StrategyName
from service.schemas import EvalQuery, EvalSpec, MetricGroup
from tests.scripted_llm import ScriptedServer
from tests.utils import present

SPEC = EvalSpec(
    strategies=[StrategyName.MKPQA, StrategyName.UIS],
    metrics=[MetricGroup.RETRIEVAL, MetricGroup.ANSWER, MetricGroup.WIXQA, MetricGroup.RAGEVAL, MetricGroup.RAGXPLAIN],
    top_k=3,
    gate="deterministic",
    seed=None,
)
RX = {"Context relevancy": 9, "Context adherence": 8, "Answer relevancy": 7, "Context recall": 6, "Factuality": 5, "Grading note": 4}
INSIGHTS = {"insights": ["retrieval misses"], "actions": [{"priority": 1, "metric": "rx_factuality", "action": "fix facts"}]}


def reply(prompt: str) -> str:
    """What the scripted model says to each kind of prompt (judge prompts by their opening words)."""
    if prompt.startswith("You are an impartial judge"):
        return '{"score": 8, "reason": "answers it"}'
    if prompt.startswith("Break the answer"):
        return '{"statements": ["One.", "Two."]}'
    if prompt.startswith("Your task is to judge the faithfulness"):
        return '{"verdicts": [{"statement": 1, "verdict": 1}, {"statement": 2, "verdict": 0}]}'
    if prompt.startswith("Below are a context retrieved"):  # wixqa context recall: only the first sentence found
        n = len(re.findall(r"^\d+\. ", prompt.split("Reference answer sentences:")[1], flags=re.M))
        return json.dumps({"attributed": [1] + [0] * (n - 1)})
    if prompt.startswith("You compare an assistant's answer"):
        return '{"factual": 1, "reason": "agrees"}'
    if prompt.startswith("Extract the key points"):
        return '{"key_points": ["first point", "second point", "third point"]}'
    if prompt.startswith("Compare an assistant's answer with the numbered key points"):
        return '{"labels": [{"key_point": 1, "label": "covered"}, {"key_point": 2, "label": "contradicted"}, {"key_point": 3, "label": "missing"}]}'
    if prompt.startswith("You evaluate one aspect"):
        aspect = prompt.split("Aspect: ", 1)[1].split(":", 1)[0]
        return json.dumps({"score": RX[aspect], "explanation": f"{aspect} as scripted"})
    if prompt.startswith("You analyse the evaluation"):
        return json.dumps(INSIGHTS)
    return "Answer from the sources [1]."  # the answer itself


def _questions() -> list[EvalQuery]:
    qs = [EvalQuery.model_validate_json(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    picked = qs[::45][:4]
    # One question without a reference answer (a grading note only).
    picked.append(qs[7].model_copy(update={"qid": "no-ref", "answer": None, "grading_note": "Must name the settings page."}))
    return picked


class _Counting:
    """A scripted server that counts prompts by kind."""

    def __init__(self) -> None:
        self.server = ScriptedServer(reply)

    def count(self, opening: str) -> int:
        return sum(p.startswith(opening) for p in self.server.prompts)


@pytest.fixture()
def judged(demo_pipeline):
    """The demo pipeline answering through the scripted model (its words are not grounded: grounding check off)."""
    servers: list[_Counting] = []
    settings = demo_pipeline.settings.model_copy(update={"min_grounding": 0.0})

    def make() -> tuple[Judge, _Counting, Pipeline]:
        s = _Counting()
        servers.append(s)
        pipeline = demo_pipeline.with_llm(s.server.llm("gen"), settings=settings)
        return Judge(s.server.llm("judge-model"), retries=0, concurrency=1), s, pipeline

    yield make
    for s in servers:
        s.server.close()


def test_every_judged_group_end_to_end_against_a_scripted_judge(demo_pipeline, judged, tmp_path):
    qs = _questions()
    with_ref = [q for q in qs if q.answer]
    judge, server, pipeline = judged()
    store = JobStore(tmp_path / "jobs.sqlite")
    job = create_job(store, SPEC, qs, "hand")
    summary = present(run_job(pipeline, judge, store, job))
    for s in SPEC.strategies:
        got = summary["results"][s]["all"]
        assert got["relevancy"] == 8.0 and got["faithfulness"] == 0.5
        recall = [1 / len(reference_sentences(q.answer or "")) for q in with_ref]
        assert got["context_recall"] == pytest.approx(sum(recall) / len(recall), abs=1e-6)
        assert got["factuality"] == 1.0
        assert got["completeness"] == got["hallucination"] == got["irrelevance"] == pytest.approx(1 / 3, abs=1e-6)
        for metric, score in zip(
            ("rx_context_relevancy", "rx_context_adherence", "rx_answer_relevancy", "rx_context_recall", "rx_factuality", "rx_grading_note"),
            RX.values(),
            strict=True,
        ):
            assert got[metric] == pytest.approx(score / 10), metric
        assert 0 <= got["token_f1"] <= 1 and 0 <= got["rouge1"] <= 1 and got["bleu"] >= 0
        counts = summary["counts"][s]["all"]
        assert counts["relevancy"] == len(qs) and counts["rx_grading_note"] == len(qs)
        # No reference answer: the metrics that compare with it are skipped and counted, never judged.
        for metric in ("rx_context_recall", "rx_factuality", "context_recall", "factuality", "completeness"):
            assert counts[metric] == len(with_ref), metric
            assert summary["failures"][s][metric] == {"skipped": 1}, metric
        assert summary["insights"][s]["actions"][0]["action"] == "fix facts"
        assert summary["insights"][s]["source"] == "judge"
    assert summary["judge"]["model"] == "openai:judge-model"
    assert not any(
        "Reference answer: (none)" in p
        for p in server.server.prompts
        if p.startswith("You evaluate one aspect") and ("Aspect: Context recall" in p or "Aspect: Factuality" in p)
    )
    no_ref = [r for r in store.results(job) if r.qid == "no-ref"]
    assert all(r.metrics["rx_grading_note"] == 0.4 and r.metrics["rx_factuality"] is None for r in no_ref)
    # Key points are extracted once per question and shared by the strategies; insights once per strategy.
    assert server.count("Extract the key points") == len(with_ref)
    assert server.count("You analyse the evaluation") == len(SPEC.strategies)


def test_the_judge_cache_carries_over_a_stop_and_resume(demo_pipeline, judged, tmp_path):
    qs = _questions()
    with_ref = [q for q in qs if q.answer]
    store = JobStore(tmp_path / "jobs.sqlite")
    judge, whole_server, pipeline = judged()
    whole = present(run_job(pipeline, judge, store, create_job(store, SPEC, qs, "hand")))

    job = create_job(store, SPEC, qs, "hand")
    judge, first, pipeline = judged()
    # Stop after question 0 (both strategies) and question 1's first strategy: its key points are then cached.
    assert run_job(pipeline, judge, store, job, should_stop=lambda: len(store.done_keys(job)) >= 3) is None
    extracted_before = first.count("Extract the key points")
    assert extracted_before == 2
    judge, second, pipeline = judged()
    resumed = present(run_job(pipeline, judge, store, job))
    assert second.count("Extract the key points") == len(with_ref) - extracted_before  # none extracted twice
    assert first.count("Extract the key points") + second.count("Extract the key points") == len(with_ref)
    assert resumed["results"] == whole["results"] and resumed["failures"] == whole["failures"]
    # A finished job's insights come from the cache: a second summary asks the judge nothing new.
    judge, third, pipeline = judged()
    assert run_job(pipeline, judge, store, job) is not None
    assert third.server.prompts == []
