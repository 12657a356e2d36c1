"""The typed question record (:class:`~service.evaluation.record.QuestionRecord`) keeps the JSON jobs have always stored:
a record made by a real evaluation comes back from the job store unchanged, and rows written before the model (the
dicts of the code before it, literal here) load into it and are written again byte for byte."""

from __future__ import annotations

import json
import sqlite3

from service.demo import QUERIES
from service.evaluation.jobs import JobStore
from service.evaluation.question import evaluate_question
from service.evaluation.record import QuestionRecord
from service.evaluation.runner import create_job
from service.generation.modes import AnswerMode
from service.retrieval.strategies import StrategyName
from service.schemas import EvalQuery, EvalSpec
from tests.utils import present

ALWAYS = ["qid", "query", "domains", "kind", "strategy", "position", "gold_doc_ids", "ranking", "active_domains", "fallback", "probabilities"]
ANSWERED = ["answer", "answer_mode", "answer_error", "generate_ms", "confidence"]


def _rows(store: JobStore, job_id: str) -> list[str]:
    """The stored JSON of a job's records, as the results table holds it."""
    with sqlite3.connect(store.path) as c:
        return [r[0] for r in c.execute("SELECT record FROM results WHERE job_id = ? ORDER BY position, strategy", (job_id,))]


def test_a_real_record_round_trips_through_the_job_store(demo_pipeline, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    qs = [EvalQuery.model_validate_json(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()][:2]
    spec = EvalSpec.model_validate({"strategies": ["fused", "mkpqa"], "metrics": ["retrieval", "answers"], "top_k": 5})
    job = create_job(store, spec, qs, "hand")
    job_spec, questions = present(store.spec(job)), store.queries(job)
    made: list[QuestionRecord] = []
    for position, (q, prepared) in enumerate(zip(questions, demo_pipeline.prepare_many([q.query for q in questions]), strict=True)):
        for strategy in job_spec.strategies:
            made.append(evaluate_question(demo_pipeline, None, job_spec, q, position, strategy, prepared))
            store.save_result(job, made[-1])
    loaded = store.results(job)
    assert [r.stored() for r in loaded] == [r.stored() for r in made]
    assert [list(r.stored()) for r in loaded] == [list(r.stored()) for r in made]  # the keys in their order
    assert _rows(store, job) == [json.dumps(r.stored()) for r in made]
    assert [(r.qid, r.strategy) for r in loaded] == [(q.qid, s) for q in questions for s in ("fused", "mkpqa")]
    for r in loaded:
        stored = r.stored()
        selector = ["selector"] if r.strategy == "fused" and r.selector is not None else []
        assert list(stored) == [*ALWAYS, "metrics", "outcomes", *selector, *ANSWERED, "ms"]
        assert r.strategy in (StrategyName.FUSED, StrategyName.MKPQA) and isinstance(r.answer_mode, AnswerMode)
        assert stored["strategy"] == str(r.strategy) and type(stored["strategy"]) is str and type(stored["answer_mode"]) is str
        assert list(stored["ranking"][0]) == ["doc_id", "domain", "title", "score", "unified_score"]
        assert "answer_ms" in r.metrics and r.outcomes == {}


# Rows as the code before QuestionRecord wrote them (json.dumps of its dicts): an lfs question answered and judged
# (selector, answer, outcomes with detail and judge, key points), a ranking-only one, and a message of two questions.
OLD_ROWS = [
    '{"qid": "q1", "query": "How do I import contacts?", "domains": ["orbit"], "kind": "uni", "strategy": "lfs", "position": 0, '
    '"gold_doc_ids": ["orbit/import#002"], "ranking": [{"doc_id": "orbit/import#002", "domain": "orbit", "title": "Import", '
    '"score": 0.71234, "unified_score": 0.71234}], "active_domains": ["orbit"], "fallback": false, '
    '"probabilities": {"orbit": 0.9, "ledger": 0.1}, "metrics": {"acc_at_top1": 1.0, "recall_at_5": 1.0, "relevancy": 8.0, '
    '"faithfulness": null, "completeness": 0.5}, "outcomes": {"relevancy": {"value": 8.0, "explanation": "answers it", '
    '"error": null, "kind": null, "calls": 1, "judge": "judge-x"}, "faithfulness": {"value": null, "explanation": null, '
    '"error": "unparseable judge reply: empty reply", "kind": "parse", "calls": 3, "detail": {"raw": ""}, "judge": "judge-x"}, '
    '"completeness": {"value": 0.5, "explanation": "labels: covered, missing", "error": null, "kind": null, "calls": 1, '
    '"judge": "judge-x"}}, "selector": {"votes": {"orbit": true, "ledger": null}, "failures": 1, "llm_calls": 2, '
    '"errors": ["lfs call failed: timeout"]}, "answer": "Go to Contacts > Import [1].", "answer_mode": "generative", '
    '"answer_error": null, "generate_ms": 812.5, "confidence": {"covered": true, "value": 0.93, "threshold": 0.5, '
    '"evidence": {"max_prob": 0.9, "p_sum": 1.0}, "model": null}, "key_points": ["Contacts > Import", "map the columns"], '
    '"ms": 901.2, "judge": "judge-x"}',
    '{"qid": "q2", "query": "refunds?", "domains": [], "kind": "oos", "strategy": "uis", "position": 1, "gold_doc_ids": [], '
    '"ranking": [], "active_domains": ["ledger", "orbit"], "fallback": false, "probabilities": {"ledger": 0.5, "orbit": 0.5}, '
    '"metrics": {"acc_at_top1": null, "domains_searched": 2.0}, "outcomes": {}, "ms": 12.0}',
    '{"qid": "q3", "query": "Import contacts? And refunds?", "domains": ["orbit", "ledger"], "kind": "cross", "strategy": "fused", '
    '"position": 2, "gold_doc_ids": [], "ranking": [], "active_domains": ["orbit", "ledger"], "fallback": false, '
    '"probabilities": {"orbit": 0.8, "ledger": 0.7}, "metrics": {}, "outcomes": {}, "selector": {"questions": [{"query": '
    '"Import contacts?", "active_domains": ["orbit"], "probabilities": {"orbit": 0.8, "ledger": 0.2}, "selector": {"fused": '
    '{"orbit": 0.8, "ledger": 0.1}}}, {"query": "And refunds?", "active_domains": ["ledger"], "probabilities": {"orbit": 0.3, '
    '"ledger": 0.7}, "selector": null}], "errors": []}, "ms": 30.5}',
]


def test_rows_stored_before_the_model_load_and_are_written_again_unchanged(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    with sqlite3.connect(store.path) as c:
        c.executemany(
            "INSERT INTO results (job_id, strategy, qid, position, record) VALUES ('old', ?, ?, ?, ?)",
            [(json.loads(row)["strategy"], json.loads(row)["qid"], i, row) for i, row in enumerate(OLD_ROWS)],
        )
    judged, ranked, joint = store.results("old")
    assert [json.dumps(r.stored()) for r in (judged, ranked, joint)] == OLD_ROWS
    assert judged.strategy is StrategyName.LFS and judged.answer_mode is AnswerMode.GENERATIVE and judged.judge == "judge-x"
    assert present(judged.selector).votes == {"orbit": True, "ledger": None} and present(judged.selector).failures == 1
    assert judged.outcomes["faithfulness"].kind == "parse" and judged.outcomes["faithfulness"].detail == {"raw": ""}
    assert judged.outcomes["relevancy"].judge == "judge-x" and judged.ranking[0].doc_id == "orbit/import#002"
    assert present(judged.confidence).covered and judged.key_points == ["Contacts > Import", "map the columns"]
    assert ranked.answer is None and ranked.selector is None and "answer" not in ranked.stored() and "selector" not in ranked.stored()
    assert [q.query for q in present(present(joint.selector).questions)] == ["Import contacts?", "And refunds?"]
    store.save_result("again", judged)  # written again by the store: the same row
    assert _rows(store, "again") == OLD_ROWS[:1]
