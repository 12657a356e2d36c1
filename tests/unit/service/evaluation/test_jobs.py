"""Evaluation jobs: versions pinned at creation, claims kept alive by a heartbeat thread, liveness across hosts, cancels,
locked databases, per-client caps (a job streamed over a real server: test_jobs_streaming.py; a resumed job on the demo pipeline:
test_jobs_resume.py, both in tests/integration/evaluation/)."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time

import pytest

from service.evaluation import jobs as jobs_module
from service.evaluation.jobs import JobStore, QueuedJob
from service.evaluation.record import QuestionRecord
from service.evaluation.spec import JobQuestion, JobSpec
from service.evaluation.worker import EvalWorker
from service.retrieval.strategies import StrategyName
from service.schemas import EvalSpec, MetricGroup
from tests.utils import present, wait_until

SPEC = EvalSpec(strategies=[StrategyName.MKPQA, StrategyName.UIS], metrics=[MetricGroup.RETRIEVAL], top_k=5, gate="stochastic", seed=11)


def test_a_slow_question_keeps_its_claim_through_the_heartbeat_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs_module, "STALE_S", 1.0)
    store = JobStore(tmp_path / "jobs.sqlite")
    job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="slow")])
    started, finish = threading.Event(), threading.Event()

    def slow(job_id, should_stop) -> None:  # noqa: ANN001 - one judged question far slower than STALE_S
        started.set()
        finish.wait(30)
        store.finish(job_id, {"ok": True})

    worker = EvalWorker(store, slow)
    worker.start()
    try:
        assert started.wait(30)
        claimed = time.monotonic()
        # until 3 x STALE_S have passed since the claim (and since any result was saved), no other worker takes it
        taken = wait_until(lambda: store.claim(job, "otherhost:1:other") or time.monotonic() - claimed > 3 * jobs_module.STALE_S, 60, interval=0.1)
        assert taken and time.monotonic() - claimed > 3 * jobs_module.STALE_S, "a live job was taken by another worker"
    finally:
        finish.set()
        worker.stop()
    assert present(store.get(job))["status"] == "done"


def test_claims_know_their_host(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs_module, "STALE_S", 1.0)
    store = JobStore(tmp_path / "jobs.sqlite")
    job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")])
    # A worker on another host: its pid means nothing here, only its heartbeat tells whether it lives.
    assert store.claim(job, "other-host:999999:abc")
    assert not store.claim(job, jobs_module.owner_id())
    with sqlite3.connect(tmp_path / "jobs.sqlite") as c:  # its last heartbeat older than STALE_S (no wait for it)
        c.execute("UPDATE jobs SET heartbeat = ? WHERE id = ?", (time.time() - 1.2 * jobs_module.STALE_S, job))
    assert store.claim(job, jobs_module.owner_id())  # its heartbeat went stale
    # On this host a dead process frees the claim at once, though its heartbeat is fresh.
    job2 = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")])
    assert store.claim(job2, f"{socket.gethostname()}:999999:dead")
    assert store.claim(job2, jobs_module.owner_id())
    assert jobs_module.owner_id().startswith(socket.gethostname() + ":")


def _looping(started: threading.Event, stopped: threading.Event):  # noqa: ANN202
    """A job that runs until its ``should_stop`` says so (at most 20 s), like run_job between questions."""

    def run(job_id, should_stop) -> None:  # noqa: ANN001
        started.set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            if should_stop():
                stopped.set()
                return
            time.sleep(0.05)

    return run


def test_a_cancel_received_by_another_process_stops_the_job(tmp_path):
    """Two replicas share the jobs database: the one that receives DELETE is not the one running the job."""
    store = JobStore(tmp_path / "jobs.sqlite")
    job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")])
    started, stopped = threading.Event(), threading.Event()
    running = EvalWorker(store, _looping(started, stopped))
    other = EvalWorker(JobStore(tmp_path / "jobs.sqlite"), lambda job_id, should_stop: None)  # never runs anything
    running.start()
    try:
        assert started.wait(30)
        other.cancel(job)
        assert stopped.wait(10), "the running worker never heard of the cancel"
    finally:
        running.stop()
    assert present(store.get(job))["status"] == "cancelled" and running.running is False


def test_a_worker_that_lost_its_claim_stops_and_leaves_the_job_to_the_new_owner(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")])
    started, stopped = threading.Event(), threading.Event()
    worker = EvalWorker(store, _looping(started, stopped))
    worker.start()
    try:
        assert started.wait(30)
        # The worker paused longer than STALE_S (its heartbeat is old), and a worker on another host took the job over.
        with sqlite3.connect(tmp_path / "jobs.sqlite") as c:
            c.execute("UPDATE jobs SET heartbeat = ? WHERE id = ?", (time.time() - 2 * jobs_module.STALE_S, job))
        assert store.claim(job, "otherhost:42:new")
        assert stopped.wait(10), "the worker went on beside the new owner"
    finally:
        worker.stop()
    assert store.holder(job) == ("running", "otherhost:42:new")  # neither released nor failed by the old owner


class _BusyStore(JobStore):
    """The jobs database answering "database is locked" (past SQLite's busy timeout) to the first ``failures`` reads."""

    failures = 3

    def queued(self) -> list[QueuedJob]:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("database is locked")
        return super().queued()


def test_a_locked_database_does_not_end_the_worker_thread(tmp_path, monkeypatch):
    from service.evaluation import worker as worker_module

    monkeypatch.setattr(worker_module, "RETRY_S", 0.05)
    store = _BusyStore(tmp_path / "jobs.sqlite")
    ran = threading.Event()
    calls: list[str] = []

    def run(job_id, should_stop) -> None:  # noqa: ANN001 - the first try meets the locked database while saving
        calls.append(job_id)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        store.finish(job_id, {"ok": True})
        ran.set()

    worker = EvalWorker(store, run)
    worker.start()
    try:
        assert wait_until(lambda: store.failures == 0, 30)
        job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")])
        worker.wake()
        assert ran.wait(30), "the worker thread died on the locked database"
        assert worker.running
    finally:
        worker.stop()
    assert present(store.get(job))["status"] == "done" and calls == [job, job]  # resumed, not failed, after the locked save


def test_unfinished_jobs_are_capped_per_client_and_finished_ones_purged(tmp_path):
    from service.evaluation.quota import JobQuota, TooManyJobs

    store = JobStore(tmp_path / "jobs.sqlite")
    spec, qs = JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="q")]
    first = store.create(spec, qs, client="key:a", quota=JobQuota(max_unfinished=2))
    store.create(spec, qs, client="key:a", quota=JobQuota(max_unfinished=2))
    with pytest.raises(TooManyJobs):
        store.create(spec, qs, client="key:a", quota=JobQuota(max_unfinished=2))
    store.create(spec, qs, client="key:b", quota=JobQuota(max_unfinished=2))  # another key has its own budget
    store.finish(first, {"ok": True})
    third = store.create(spec, qs, client="key:a", quota=JobQuota(max_unfinished=2))  # a finished job no longer counts
    record = {"qid": "q1", "query": "q", "domains": [], "kind": "oos", "strategy": "uis", "position": 0, "gold_doc_ids": []}
    routing = {"ranking": [], "active_domains": [], "fallback": True, "probabilities": {}, "metrics": {}, "outcomes": {}}
    store.save_result(first, QuestionRecord.model_validate({**record, **routing}))
    store.cache_set(first, "k", 1)
    assert store.purge(time.time() - 60) == 0  # finished just now: kept
    assert store.purge(time.time() + 1) == 1  # the finished one only; unfinished jobs are never purged
    assert store.get(first) is None and store.results(first) == [] and store.cache_get(first, "k") is None
    assert present(store.get(third))["status"] == "queued" and len(store.unfinished()) == 3


def test_a_jobs_spec_and_questions_come_back_typed_from_the_store(tmp_path):
    """The store keeps the spec and questions as JSON; they come back as JobSpec and JobQuestion, ``scope`` written
    only for a job of some products (an unscoped job's view has none, as before)."""
    store = JobStore(tmp_path / "jobs.sqlite")
    scoped = JobSpec(strategies=[StrategyName.UIS], scope=["orbit"], dataset="demo", seed=3)
    qs = [JobQuestion(qid="q1", query="q", domains=["orbit"], gold_doc_ids=["orbit/a#0"], answer="a")]
    job = store.create(scoped, qs)
    assert store.spec(job) == scoped and store.queries(job) == qs
    assert present(store.get(job))["spec"] == {**scoped.view(), "dataset": "demo"} and scoped.view()["scope"] == ["orbit"]
    whole = store.create(JobSpec(strategies=[StrategyName.UIS]), qs)
    assert "scope" not in present(store.get(whole))["spec"] and present(store.spec(whole)).scope is None
    assert store.spec("no-such-job") is None


def test_a_clients_finished_jobs_and_stored_questions_are_bounded(tmp_path):
    """Issue 50, fault 3: a client keeps at most ``keep_finished`` finished jobs, and its jobs' questions stay within
    ``max_question_bytes`` (its oldest finished jobs go first; TooMuchStored when its unfinished ones alone would
    pass it, and then nothing is deleted); other clients' jobs are never touched; deleted jobs give their space back."""
    from service.evaluation.quota import JobQuota, TooMuchStored

    path = tmp_path / "jobs.sqlite"
    store = JobStore(path)
    spec = JobSpec(strategies=[StrategyName.UIS])

    def questions(tag: str, n: int) -> list[JobQuestion]:
        return [JobQuestion(qid=f"q{i}", query=f"{tag} {i} " + "x" * 1000) for i in range(n)]

    theirs = store.create(spec, questions("b", 100), client="key:b")
    store.finish(theirs, {"ok": True})
    kept = JobQuota(keep_finished=2)
    small = [store.create(spec, questions(f"s{i}", 1), client="key:a", quota=kept) for i in range(4)]
    for job in small:
        store.finish(job, {"ok": True})
    store.create(spec, questions("s4", 1), client="key:a", quota=kept)
    assert [store.get(j) is not None for j in small] == [False, False, True, True]  # the two newest finished are kept

    budget = JobQuota(max_question_bytes=300_000)  # each job below stores ~110 KB of questions
    big = []
    for i in range(4):
        big.append(store.create(spec, questions(f"a{i}", 100), client="key:a", quota=budget))
        store.finish(big[-1], {"ok": True})
    assert [store.get(j) is not None for j in big] == [False, False, True, True]
    running = store.create(spec, questions("r", 100), client="key:a", quota=budget)  # deletes big[2] to fit
    with pytest.raises(TooMuchStored) as refused:
        store.create(spec, questions("r2", 200), client="key:a", quota=budget)  # 110 KB unfinished + 220 KB > 300 KB
    assert refused.value.stored > 100_000 and refused.value.limit == 300_000
    assert store.get(big[3]) is not None and store.get(running) is not None  # a refused job deletes nothing
    assert present(store.get(theirs))["status"] == "done"  # another client's job is not this client's budget

    def checkpointed_size() -> int:
        with sqlite3.connect(path) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return path.stat().st_size

    size = checkpointed_size()
    assert store.purge(time.time() + 1) == 2  # theirs and big[3]: the smaller ones went to fit the budget
    assert checkpointed_size() < size - 150_000  # the deleted jobs' pages went back to the file system


def test_two_clients_jobs_take_turns_and_both_finish(tmp_path, monkeypatch):
    """Issue 50, fault 7, in the worker: with FEDQA_JOBS_SLICE_S=0 two clients' jobs alternate question by question
    (each turn finishes one before it gives way, so they never pass the worker back and forth without progress),
    a paused job shows ``queued``, and both finish."""
    from service.evaluation import worker as worker_module

    monkeypatch.setattr(worker_module, "CLAIM_POLL_S", 0.0)
    store = JobStore(tmp_path / "jobs.sqlite")
    spec = JobSpec(strategies=[StrategyName.UIS])
    record = {"domains": [], "kind": "oos", "strategy": "uis", "gold_doc_ids": []}
    routing = {"ranking": [], "active_domains": [], "fallback": True, "probabilities": {}, "metrics": {}, "outcomes": {}}
    order: list[str] = []
    seen: list[tuple[str, int]] = []

    def run(job_id, should_stop) -> None:  # noqa: ANN001 - like run_job: skip the stored questions, stop when told
        done = store.done_keys(job_id)
        for i, q in enumerate(store.queries(job_id)):
            if ("uis", q.qid) in done:
                continue
            if should_stop():
                return
            store.save_result(job_id, QuestionRecord.model_validate({**record, **routing, "qid": q.qid, "query": q.query, "position": i}))
            order.append(job_id)
            seen.extend((o["status"], o["progress"]["done"]) for o in (present(store.get(j)) for j in jobs if j != job_id))
        if not should_stop():
            store.finish(job_id, {"ok": True})

    jobs = [store.create(spec, [JobQuestion(qid=f"q{i}", query=f"{c} {i}") for i in range(3)], client=c) for c in ("key:a", "key:b")]
    worker = EvalWorker(store, run, slice_s=0.0)
    worker.start()
    try:
        wait_until(lambda: all(present(store.get(j))["status"] == "done" for j in jobs), 30)
    finally:
        worker.stop()
    assert [present(store.get(j))["status"] for j in jobs] == ["done", "done"]
    assert order == [jobs[0], jobs[1]] * 3  # one question each, in turn (before: all of a's, then b's)
    assert ("queued", 1) in seen  # the paused job went back to the queue, its finished question kept
