"""Evaluation jobs on the demo pipeline: a resumed job equals an uninterrupted one; a resume with other versions is refused or restarted."""

from __future__ import annotations

import pytest

from service.demo import QUERIES
from service.evaluation.jobs import JobStore
from service.evaluation.record import QuestionRecord
from service.evaluation.runner import EvaluationError, create_job, pinned_versions, run_job
from service.pipeline import Pipeline
from service.schemas import EvalQuery
from tests.unit.service.evaluation.test_jobs import SPEC
from tests.utils import present


def _questions(n: int = 40) -> list[EvalQuery]:
    qs = [EvalQuery.model_validate_json(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return qs[:: max(1, len(qs) // n)][:n]


class _Retrained(Pipeline):
    """The demo pipeline's parts under another router version (as after ``fedqa train router``)."""

    @property
    def versions(self) -> dict:
        return {**super().versions, "router": "router-retrained"}


def _retrained(demo_pipeline) -> Pipeline:
    return _Retrained(
        demo_pipeline.settings, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=demo_pipeline.store, lexical=demo_pipeline.lexical
    )


def _stop_after(store: JobStore, job_id: str, n: int):
    return lambda: len(store.done_keys(job_id)) >= n


def _strip_timing(records: list[QuestionRecord]) -> list[dict]:
    return [r.model_dump(exclude={"ms", "generate_ms"}) for r in records]


def test_resumed_job_equals_the_uninterrupted_one_for_the_same_seed(demo_pipeline, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    qs = _questions()
    whole = create_job(store, SPEC, qs, "demo", pinned_versions(demo_pipeline, None, SPEC))
    reference = present(run_job(demo_pipeline, None, store, whole))
    parted = create_job(store, SPEC, qs, "demo", pinned_versions(demo_pipeline, None, SPEC))
    assert run_job(demo_pipeline, None, store, parted, should_stop=_stop_after(store, parted, 23)) is None
    assert 23 <= len(store.done_keys(parted)) < 2 * len(qs)
    resumed = present(run_job(demo_pipeline, None, store, parted))
    assert _strip_timing(store.results(parted)) == _strip_timing(store.results(whole))
    assert resumed["results"] == reference["results"] and resumed["ci95"] == reference["ci95"]
    # The seed is used: the stochastic gate drew differently for some question than the deterministic one would.
    searched = [r.active_domains for r in store.results(whole) if r.strategy == "mkpqa"]
    other = create_job(store, SPEC.model_copy(update={"seed": 12}), qs, "demo")
    run_job(demo_pipeline, None, store, other)
    assert searched != [r.active_domains for r in store.results(other) if r.strategy == "mkpqa"]


def test_a_resume_with_other_versions_is_refused_or_restarted(demo_pipeline, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    qs = _questions(12)
    job = create_job(store, SPEC, qs, "demo", pinned_versions(demo_pipeline, None, SPEC))
    assert present(store.versions(job))["router"] == demo_pipeline.versions["router"]
    run_job(demo_pipeline, None, store, job, should_stop=_stop_after(store, job, 5))
    done = store.done_keys(job)
    retrained = _retrained(demo_pipeline)
    try:
        with pytest.raises(EvaluationError, match="other versions"):
            run_job(retrained, None, store, job)
        failed = present(store.get(job))
        assert failed["status"] == "failed" and "router-retrained" in failed["error"]
        assert store.done_keys(job) == done  # nothing computed by the other system

        again = create_job(store, SPEC, qs, "demo", pinned_versions(demo_pipeline, None, SPEC))
        run_job(demo_pipeline, None, store, again, should_stop=_stop_after(store, again, 5))
        summary = present(run_job(retrained, None, store, again, restart=True))  # start over with the new versions
        assert summary["versions"]["router"] == "router-retrained" and present(store.versions(again))["router"] == "router-retrained"
        assert present(store.get(again))["progress"] == {"done": 2 * len(qs), "total": 2 * len(qs)}

        # A job that has not started yet is simply pinned to the versions that start it.
        queued = create_job(store, SPEC, qs, "demo", pinned_versions(demo_pipeline, None, SPEC))
        assert present(run_job(retrained, None, store, queued))["versions"]["router"] == "router-retrained"
    finally:
        retrained.close(close_store=False)
