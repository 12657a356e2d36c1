"""A finished job's questions are streamed over a real server a page at a time (a job of 1000 records of 6 KB
each; the server's peak memory measured).
"""

from __future__ import annotations

from service.evaluation.jobs import JobStore
from service.evaluation.record import QuestionRecord
from service.evaluation.spec import JobQuestion, JobSpec
from service.retrieval.strategies import StrategyName


def _big_record(i: int, strategy: str) -> QuestionRecord:
    """A record of a judged, answered question (some 6 KB of JSON, as a real job's)."""
    return QuestionRecord.model_validate(
        {
            "qid": f"q{i}",
            "query": f"How do I change the retry schedule of failed payments, case {i}?",
            "domains": ["ledger"],
            "kind": "uni",
            "strategy": strategy,
            "position": i,
            "gold_doc_ids": [f"ledger/dunning#{i % 50:03d}"],
            "ranking": [
                {"doc_id": f"ledger/dunning#{j:03d}", "domain": "ledger", "title": f"Dunning > Retries {j}", "score": 0.5, "unified_score": 0.5}
                for j in range(10)
            ],
            "active_domains": ["ledger"],
            "fallback": False,
            "probabilities": {"orbit": 0.1, "ledger": 0.9},
            "metrics": {f"metric_{k}": 0.5 for k in range(20)},
            "outcomes": {
                f"judged_{k}": {
                    "value": 1.0,
                    "explanation": "Stated. " * 30,
                    "error": None,
                    "kind": None,
                    "calls": 1,
                    "detail": {"statements": ["Retried. " * 20] * 6},
                }
                for k in range(3)
            },
            "answer": "The subscription becomes past_due and Ledger retries the payment. " * 10,
            "answer_mode": "extractive",
        }
    )


def test_a_jobs_questions_are_streamed_a_page_at_a_time_not_built_whole(tmp_path):
    """Issue 50 (suspected, pinned): GET /evaluate/{id}/questions built the whole body in memory: about 6 times its JSON
    at its peak (a job of the most questions, 390 MB of JSON: some 2.4 GB). Now it is streamed
    FEDQA_JOBS_RESULTS_PAGE records at a time, through a real server: the server's peak is a few pages, the body the
    same records in the same order."""
    import tracemalloc

    import httpx

    from service.api.app import create_app
    from service.api.state import ServiceState
    from tests.utils import make_settings, served_app

    settings = make_settings(tmp_path / "home", jobs_results_page=20)
    store = JobStore.for_settings(settings)
    strategies = [StrategyName.UIS, StrategyName.RFS]
    job = store.create(JobSpec(strategies=strategies), [JobQuestion(qid=f"q{i}", query=f"question {i}") for i in range(500)])
    for i in range(500):
        for s in strategies:
            store.save_result(job, _big_record(i, s.value))
    store.finish(job, {})
    with served_app(create_app(settings, ServiceState(settings))) as url, httpx.Client(base_url=url, timeout=120) as client:
        body = client.get(f"/evaluate/{job}/questions")  # also opens the jobs database (outside the measure)
        assert body.status_code == 200 and "content-length" not in body.headers
        got = body.json()
        assert got["id"] == job and got["records"] == [r.stored() for r in store.results(job)] and len(got["records"]) == 1000
        size = len(body.content)
        del body, got
        tracemalloc.start()
        try:
            with client.stream("GET", f"/evaluate/{job}/questions") as r:
                assert sum(len(piece) for piece in r.iter_bytes()) == size
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert size > 5_000_000
    assert peak < size / 2, f"serving {size / 1e6:.1f} MB of records took {peak / 1e6:.1f} MB at its peak"
