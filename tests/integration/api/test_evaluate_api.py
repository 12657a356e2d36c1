"""/evaluate jobs over HTTP: dry run, validation, the same numbers as an in-process run, a restart
mid-job that loses no finished result, cancellation, the HTML report; and ``fedqa evaluate``."""

from __future__ import annotations

import json
import shutil
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import ServiceState
from service.cli import main
from service.demo import QUERIES
from service.evaluation.jobs import JobStore
from service.evaluation.runner import create_job, load_dataset, run_job
from service.files import copytree_sparse
from service.pipeline import Pipeline
from service.retrieval.strategies import StrategyName
from service.schemas import EvalSpec, MetricGroup
from tests.utils import free_port, make_settings, present, served_app

LIMIT = 60
SPEC = EvalSpec(
    strategies=[StrategyName.MKPQA, StrategyName.UIS, StrategyName.RFS], metrics=[MetricGroup.RETRIEVAL], top_k=5, gate="deterministic", seed=None
)


def _mini() -> list[dict]:
    """58 demo questions, uni and cross: enough to stop a job mid-way, few enough for a fast suite."""
    qs = [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    uni = [q for q in qs if len(q["domains"]) == 1]
    cross = [q for q in qs if len(q["domains"]) > 1]
    return uni[::4] + cross[::3]


def _put_mini(home) -> None:
    """The mini set as the named dataset "mini" of a home."""
    folder = home / "eval" / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mini.jsonl").write_text("".join(json.dumps(q) + "\n" for q in _mini()), encoding="utf-8")


class _SharedPipeline(Pipeline):
    """The session's demo pipeline objects in a new Pipeline whose close() leaves the shared store open."""

    def close(self, *, close_store: bool = True) -> None:
        self._pool.shutdown(wait=False)


def _state(demo_pipeline, home, pipeline_class: type[Pipeline] = _SharedPipeline) -> ServiceState:
    settings = make_settings(home)

    def loader(s, backend=None):
        return pipeline_class(s, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=demo_pipeline.store, lexical=demo_pipeline.lexical)

    return ServiceState(settings, loader=loader)


class _Hold:
    """A point a job reaches and waits on: the first retrieval of ``query`` sets ``held`` and waits for ``release``."""

    def __init__(self, query: str) -> None:
        self.query, self.held, self.release = query, threading.Event(), threading.Event()

    def pipeline_class(self) -> type[Pipeline]:
        hold = self

        class Held(_SharedPipeline):
            def retrieve(self, query: str, **kwargs):  # noqa: ANN003, ANN201
                if query == hold.query and not hold.held.is_set():
                    hold.held.set()
                    assert hold.release.wait(120), "the test never released the held question"
                return super().retrieve(query, **kwargs)

        return Held


def _wait(client, job_id, until, timeout=120.0, interval=0.02):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        body = client.get(f"/evaluate/{job_id}").json()
        if until(body):
            return body
        time.sleep(interval)
    raise AssertionError(f"job {job_id} did not get there in {timeout} s: {body}")


@pytest.fixture(scope="module")
def reference(demo_pipeline, tmp_path_factory):
    """The demo questions evaluated in-process, without HTTP (the numbers the API must reproduce)."""
    store = JobStore(tmp_path_factory.mktemp("ref") / "jobs.sqlite")
    home = tmp_path_factory.mktemp("ref-home")
    _put_mini(home)
    job = create_job(store, SPEC, load_dataset("mini", home), "mini")
    return run_job(demo_pipeline, None, store, job), store.results(job)


def test_dry_run_and_validation(demo_pipeline, tmp_path):
    with TestClient(create_app(make_settings(tmp_path), _state(demo_pipeline, tmp_path))) as c:
        qs = [{"query": "refunds?", "domains": ["ledger"]}, {"query": "sso?", "domains": []}, {"query": "import?", "domains": ["orbit"]}]
        r = c.post("/evaluate", json={"queries": qs, "strategies": ["mkpqa", "lfs"], "metrics": ["retrieval"], "dry_run": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "dry_run" and body["progress"] == {"done": 0, "total": 6}
        assert body["plan"]["llm_calls"] == {"lfs_selection": 3 * len(demo_pipeline.domains)}
        assert c.get("/evaluate").json()["jobs"] == []  # a dry run creates no job

        assert c.post("/evaluate", json={"strategies": ["mkpqa"]}).status_code == 422  # neither queries nor dataset
        assert c.post("/evaluate", json={"dataset": "demo", "queries": qs}).status_code == 422
        assert c.post("/evaluate", json={"dataset": "../etc/passwd"}).status_code == 422
        assert "no dataset" in c.post("/evaluate", json={"dataset": "nope"}).json()["detail"]
        assert c.post("/evaluate", json={"dataset": "demo", "strategies": ["bogus"]}).status_code == 422
        # A negative seed is refused up front, as /ask refuses it (it would fail the job later).
        r = c.post("/evaluate", json={"dataset": "demo", "gate": "stochastic", "seed": -1})
        assert r.status_code == 422 and "seed" in r.json()["detail"]
        assert c.post("/ask", json={"query": "refunds?", "seed": -1}).status_code == 422
        r = c.post("/evaluate", json={"dataset": "demo", "metrics": ["answer"]})  # no LLM, no judge
        assert r.status_code == 422 and "judge" in r.json()["detail"]
        assert c.get("/evaluate/eval-missing").status_code == 404


def test_job_survives_a_restart_and_matches_the_in_process_run(demo_pipeline, tmp_path, reference):
    """The first service stops while question BLOCK_AT is in flight, held there (no timing involved): exactly the
    questions before it and the one in flight are stored; a second service resumes the job to the same numbers."""
    ref_summary, ref_records = reference
    mini, strategies = _mini(), SPEC.strategies
    block_at = 7
    assert [q["query"] for q in mini].count(mini[block_at]["query"]) == 1
    hold = _Hold(mini[block_at]["query"])
    home = tmp_path / "home"
    _put_mini(home)
    app1 = create_app(make_settings(home), _state(demo_pipeline, home, hold.pipeline_class()))
    with TestClient(app1) as c:
        r = c.post("/evaluate", json={"dataset": "mini", **SPEC.model_dump(include={"strategies", "metrics"})})
        assert r.status_code == 202, r.text
        job_id, total = r.json()["id"], r.json()["progress"]["total"]
        assert r.json()["status"] in ("queued", "running") and total == len(ref_records)
        assert hold.held.wait(120), "the job never reached the held question"
        # Held in question BLOCK_AT's first strategy: every question before it is committed, nothing after.
        assert c.get(f"/evaluate/{job_id}").json()["progress"]["done"] == block_at * len(strategies)
        worker = c.app.state.eval_worker
        worker.stop(timeout=0)  # ask the worker to stop (the shutdown below waits for it) ...
        hold.release.set()  # ... then let the question in flight finish: it is the last one stored
    worker.stop(timeout=120)  # however slow the machine, the question in flight is stored before we look
    assert not worker.running
    # The first service is gone (its worker stopped after the question in flight): the job is unfinished.
    store = JobStore.for_home(home)
    mid = present(store.get(job_id))
    assert mid["status"] == "running" and mid["progress"]["done"] == block_at * len(strategies) + 1
    before = {(r["strategy"], r["qid"]): r for r in (record.stored() for record in store.results(job_id))}
    assert set(before) == {(s, q["qid"]) for q in mini[:block_at] for s in strategies} | {(strategies[0], mini[block_at]["qid"])}

    app2 = create_app(make_settings(home), _state(demo_pipeline, home))
    with TestClient(app2) as c:  # start-up resumes the job
        done = _wait(c, job_id, lambda b: b["status"] == "done", interval=0.1)
        assert done["progress"] == {"done": total, "total": total}
        report = c.get(done["report"])
        assert report.status_code == 200 and report.text.count("<svg") >= 4 and "Acc@Top1" in report.text
        questions = c.get(f"/evaluate/{job_id}/questions").json()["records"]
    after = {(r["strategy"], r["qid"]): r for r in questions}
    assert all(after[k] == v for k, v in before.items())  # finished results kept as they were, not recomputed
    assert done["results"]["results"] == ref_summary["results"]  # the same numbers as the in-process run
    assert done["results"]["ci95"] == ref_summary["ci95"]
    assert done["dataset"] == "mini" and done["results"]["n"] == ref_summary["n"] == len(_mini())
    assert {"all", "uni", "cross"} <= set(done["results"]["results"]["mkpqa"])


def test_cancel(demo_pipeline, tmp_path):
    with TestClient(create_app(make_settings(tmp_path), _state(demo_pipeline, tmp_path))) as c:
        job_id = c.post("/evaluate", json={"dataset": "demo", "strategies": ["uis"]}).json()["id"]
        r = c.delete(f"/evaluate/{job_id}")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        worker, t0 = c.app.state.eval_worker, time.monotonic()
        while worker.current == job_id and time.monotonic() - t0 < 30:  # the worker lets go of the cancelled job
            time.sleep(0.02)
        assert worker.current != job_id
        body = c.get(f"/evaluate/{job_id}").json()
        assert body["status"] == "cancelled" and body["results"] is None and body["progress"]["done"] < body["progress"]["total"]
        assert c.get(f"/evaluate/{job_id}/report").status_code == 409


def test_evaluate_needs_the_api_key(demo_pipeline, tmp_path):
    settings = make_settings(tmp_path, api_keys="k1")
    state = _state(demo_pipeline, tmp_path)
    state.settings = settings
    with TestClient(create_app(settings, state)) as c:
        body = {"queries": [{"query": "refunds?", "domains": ["ledger"]}], "dry_run": True}
        assert c.post("/evaluate", json=body).status_code == 401
        assert c.get("/evaluate").status_code == 401
        assert c.post("/evaluate", json=body, headers={"X-API-Key": "k1"}).status_code == 200


def test_cli_evaluate_writes_summary_and_report(demo_home, reference, tmp_path, monkeypatch, capsys):
    ref_summary, _ = reference
    home = tmp_path / "home"
    copytree_sparse(demo_home, home)  # its own copy: the session's pipeline holds the original open
    if (home / "eval").exists():
        shutil.rmtree(home / "eval")
    monkeypatch.setenv("FEDQA_HOME", str(home))
    monkeypatch.setenv("FEDQA_CACHE", str(home / "cache"))
    monkeypatch.setenv("FEDQA_LLM_BACKEND", "none")
    from service.config import get_settings

    get_settings.cache_clear()
    try:
        out = tmp_path / "out"
        mini = tmp_path / "mini.jsonl"
        mini.write_text("".join(json.dumps(q) + "\n" for q in _mini()), encoding="utf-8")
        assert (
            main(["evaluate", "--queries", str(mini), "--strategies", "mkpqa,uis,rfs", "--metrics", "retrieval", "--out", str(out), "--quiet"]) == 0
        )
        printed = json.loads(capsys.readouterr().out)
        assert (
            main(["evaluate", "--dataset", "demo", "--strategies", "mkpqa,lfs", "--metrics", "retrieval,answer", "--limit", str(LIMIT), "--dry-run"])
            == 0
        )
        dry = json.loads(capsys.readouterr().out)
    finally:
        get_settings.cache_clear()
    assert printed == json.loads((out / "summary.json").read_text())
    assert set(printed) >= {"dataset", "n", "results"} and printed["dataset"] == "mini.jsonl"
    for strategy in ("mkpqa", "uis", "rfs"):
        assert {"all", "uni", "cross"} <= set(printed["results"][strategy])
        assert {"acc_at_top1", "recall_at_5", "mrr", "routing_accuracy"} <= set(printed["results"][strategy]["uni"])
    assert printed["results"] == ref_summary["results"]  # CLI and in-process (and so HTTP) agree
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "Worst questions" in html
    assert len((out / "results.jsonl").read_text().splitlines()) == 3 * printed["n"]
    assert dry["plan"]["llm_calls"]["lfs_selection"] == 4 * LIMIT and dry["plan"]["questions"] == LIMIT


def test_kill_9_mid_job_then_restart_resumes(demo_home, reference, tmp_path):
    """``fedqa serve`` as a real process, killed with SIGKILL mid-job: the restarted service finishes the job.

    Deterministic: the LLM (a scripted OpenAI-protocol server, also the judge) holds its reply to every prompt
    about question BLOCK_AT until released, so the job stands still with exactly the questions before it done."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    import httpx

    from tests.scripted_llm import ScriptedServer

    block_at = 7
    ref_summary, _ = reference
    mini = _mini()
    held, release = threading.Event(), threading.Event()

    def reply(prompt: str) -> str:
        if mini[block_at]["query"] in prompt and not release.is_set():
            held.set()
            release.wait(300)
        if prompt.startswith("You are an impartial judge"):
            return '{"score": 8, "reason": "ok"}'
        if prompt.startswith("Break the answer"):
            return '{"statements": ["One."]}'
        if prompt.startswith("Your task is to judge the faithfulness"):
            return '{"verdicts": [{"statement": 1, "verdict": 1}]}'
        return "Answer from the sources [1]."

    llm = ScriptedServer(reply)
    home = tmp_path / "home"
    copytree_sparse(demo_home, home)
    _put_mini(home)
    port = free_port()
    env = {
        **os.environ,
        "FEDQA_HOME": str(home),
        "FEDQA_CACHE": str(home / "cache"),
        "FEDQA_LLM_BACKEND": "openai",
        "FEDQA_LLM_BASE_URL": llm.url,
        "FEDQA_LLM_MODEL": "scripted",
        "FEDQA_LLM_TIMEOUT_S": "600",
        "FEDQA_JUDGE_TIMEOUT_S": "600",
        "FEDQA_JUDGE_CONCURRENCY": "1",
        "FEDQA_PORT": str(port),
        "HF_HUB_OFFLINE": "1",
    }
    for name in ("FEDQA_API_KEYS", "FEDQA_JOBS_DB", "FEDQA_JUDGE_BASE_URL"):
        env.pop(name, None)
    url = f"http://127.0.0.1:{port}"
    strategies = SPEC.strategies

    def serve() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 180:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "fedqa serve exited"
            time.sleep(0.2)
        proc.kill()
        raise AssertionError("fedqa serve did not become ready")

    proc = serve()
    try:
        r = httpx.post(f"{url}/evaluate", json={"dataset": "mini", "strategies": strategies, "metrics": ["retrieval", "answer"]}, timeout=30)
        assert r.status_code == 202, r.text
        job_id, total = r.json()["id"], r.json()["progress"]["total"]
        assert held.wait(180), "the job never reached the held question"
        # Held at question BLOCK_AT's first strategy: exactly the questions before it are committed.
        t0 = time.monotonic()
        while (done := httpx.get(f"{url}/evaluate/{job_id}", timeout=5).json()["progress"]["done"]) < block_at * len(strategies):
            assert time.monotonic() - t0 < 30
            time.sleep(0.05)
        assert done == block_at * len(strategies)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        mid = present(JobStore.for_home(home).get(job_id))
        assert mid["status"] == "running" and mid["progress"]["done"] == block_at * len(strategies)

        release.set()
        proc = serve()
        t0 = time.monotonic()
        while (body := httpx.get(f"{url}/evaluate/{job_id}", timeout=5).json())["status"] != "done":
            assert time.monotonic() - t0 < 300 and body["status"] in ("queued", "running"), body
            time.sleep(0.2)
        assert body["progress"] == {"done": total, "total": total}
        for s in strategies:
            got = body["results"]["results"][s]
            for group, metrics in ref_summary["results"][s].items():
                assert {m: got[group][m] for m in metrics} == metrics  # the retrieval numbers of an uninterrupted run
            assert got["all"]["relevancy"] == 8.0 and got["all"]["faithfulness"] == 1.0
        assert body["results"]["failures"] == {s: {} for s in strategies}
    finally:
        release.set()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        llm.close()


def test_unfinished_jobs_are_capped_per_key_and_finished_ones_deleted_after_the_keep_days(demo_pipeline, tmp_path):
    """Issue 28, fault 3: a key gets 429 with Retry-After beyond FEDQA_JOBS_MAX_UNFINISHED_PER_KEY unfinished jobs
    (another key is not affected); a job finished more than FEDQA_JOBS_KEEP_DAYS ago is deleted with its results."""
    import sqlite3

    hold = _Hold("held question?")
    settings = make_settings(tmp_path, api_keys="k1,k2", jobs_max_unfinished_per_key=2, jobs_keep_days=1)
    state = _state(demo_pipeline, tmp_path, hold.pipeline_class())
    state.settings = settings
    k1, k2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
    body = {"queries": [{"query": "held question?", "domains": []}], "strategies": ["uis"], "metrics": ["retrieval"]}
    other = {**body, "queries": [{"query": "How do refunds work?", "domains": ["ledger"]}]}
    with TestClient(create_app(settings, state)) as c:
        c.headers.update(k1)
        held = c.post("/evaluate", json=body)
        assert held.status_code == 202, held.text
        assert hold.held.wait(120)
        queued = c.post("/evaluate", json=other)
        assert queued.status_code == 202  # queued behind the held one
        refused = c.post("/evaluate", json=other)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0, refused.text
        assert "FEDQA_JOBS_MAX_UNFINISHED_PER_KEY" in refused.json()["detail"]
        assert c.post("/evaluate", json=other, headers=k2).status_code == 202  # k2 has its own budget
        hold.release.set()
        job_id = held.json()["id"]
        _wait(c, job_id, lambda b: b["status"] == "done")
        _wait(c, queued.json()["id"], lambda b: b["status"] == "done")
        assert c.get(f"/evaluate/{job_id}/questions").json()["records"]
        with sqlite3.connect(settings.jobs_path) as db:  # the held job finished two days ago
            db.execute("UPDATE jobs SET updated = ? WHERE id = ?", (time.time() - 2 * 86400, job_id))
        assert c.post("/evaluate", json=other).status_code == 202  # a new job purges the expired one
        assert c.get(f"/evaluate/{job_id}").status_code == 404
        assert c.get(f"/evaluate/{queued.json()['id']}").json()["status"] == "done"  # finished just now: kept
    with sqlite3.connect(settings.jobs_path) as db:
        assert db.execute("SELECT COUNT(*) FROM results WHERE job_id = ?", (job_id,)).fetchone()[0] == 0


def test_inline_questions_and_job_size_are_bounded(demo_pipeline, tmp_path):
    """Issue 28, faults 3 and 8: inline questions get /ask's length limit, a job at most FEDQA_JOBS_MAX_QUESTIONS."""
    settings = make_settings(tmp_path, max_query_chars=60, jobs_max_questions=3)
    state = _state(demo_pipeline, tmp_path)
    state.settings = settings
    with TestClient(create_app(settings, state)) as c:
        qs = [{"query": "How do refunds work?", "domains": ["ledger"]}, {"query": "x" * 61, "domains": []}]
        r = c.post("/evaluate", json={"queries": qs, "dry_run": True})
        assert r.status_code == 422 and "queries[1].query" in r.json()["detail"] and "60" in r.json()["detail"], r.text
        four = [{"query": f"question {i}?", "domains": []} for i in range(4)]
        r = c.post("/evaluate", json={"queries": four, "dry_run": True})
        assert r.status_code == 422 and "FEDQA_JOBS_MAX_QUESTIONS" in r.json()["detail"], r.text
        assert c.post("/evaluate", json={"queries": four, "limit": 3, "dry_run": True}).status_code == 200
        assert c.post("/evaluate", json={"dataset": "demo", "limit": 1, "dry_run": True}).status_code == 200  # 44 characters
        r = c.post("/evaluate", json={"dataset": "demo", "limit": 2, "dry_run": True})  # the second has 63
        assert r.status_code == 422 and "dataset: question" in r.json()["detail"], r.text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"query": "How do refunds work?"}\n{"query": "sso?"\n', "bad.jsonl:2: not JSON"),
        (b'{"query": "How do refunds work?"}\n\n{"query": "caf\xe9?"}\n', "bad.jsonl:3: not UTF-8"),
        (b'{"query": "How do refunds work?"}\n{"qid": "q2", "domains": ["ledger"]}\n', 'bad.jsonl:2: no "query"'),
        (b'["not", "an", "object"]\n', "bad.jsonl:1: expected a JSON object"),
    ],
)
def test_a_malformed_dataset_is_422_naming_its_line_not_500(demo_pipeline, tmp_path, content, expected):
    """Issue 28, fault 10: a dataset file the server cannot read is the client's 422, naming the line; no server path."""
    home = tmp_path / "home"
    (home / "eval" / "datasets").mkdir(parents=True)
    (home / "eval" / "datasets" / "bad.jsonl").write_bytes(content)
    with TestClient(create_app(make_settings(home), _state(demo_pipeline, home)), raise_server_exceptions=False) as c:
        r = c.post("/evaluate", json={"dataset": "bad", "metrics": ["retrieval"]})
        assert r.status_code == 422 and expected in r.json()["detail"], r.text
        assert str(home) not in r.text
        missing = c.post("/evaluate", json={"dataset": "nope", "metrics": ["retrieval"]})
        assert missing.status_code == 422 and "$FEDQA_HOME/eval/datasets/nope.jsonl" in missing.json()["detail"]
        assert str(home) not in missing.text


def _jobs_files_size(path) -> int:
    """Bytes the jobs database takes on disk: the file and its write-ahead log."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def test_create_and_cancel_rounds_do_not_fill_the_jobs_volume(demo_pipeline, tmp_path):
    """Issue 50, fault 3: 25 rounds of a 1 MB job and its DELETE grew jobs.sqlite by ~28 MB (a cancelled job kept
    its questions for FEDQA_JOBS_KEEP_DAYS). Through a real server: a cancelled job drops its questions at once, so
    the database stops growing after the first rounds and stays near one job's size."""
    hold = _Hold("round 0 question 0 " + "x" * 1981)  # the first job's first question: the worker stays on it
    settings = make_settings(tmp_path, api_keys="k1", rate_limit_per_minute=0)
    state = _state(demo_pipeline, tmp_path, hold.pipeline_class())
    state.settings = settings
    sizes = []
    with served_app(create_app(settings, state), lifespan="on") as url, httpx.Client(base_url=url, timeout=120, headers={"X-API-Key": "k1"}) as c:
        for r in range(25):
            qs = [{"query": f"round {r} question {i} " + "x" * (1981 - len(f"{r}{i}") + 2), "domains": []} for i in range(500)]
            created = c.post("/evaluate", json={"queries": qs, "strategies": ["uis"], "metrics": ["retrieval"]})
            assert created.status_code == 202, created.text
            if r == 0:
                assert hold.held.wait(120), "the first job never started"
            job_id = created.json()["id"]
            cancelled = c.delete(f"/evaluate/{job_id}")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
            assert c.get(f"/evaluate/{job_id}").json()["progress"]["total"] == 500  # still readable, its view whole
            sizes.append(_jobs_files_size(settings.jobs_path))
        hold.release.set()
    print("jobs database after each create+cancel round (bytes):", sizes)
    one_job = 1_000_000
    assert max(sizes) < 4 * one_job, sizes  # before: 25 rounds took ~28 MB
    assert sizes[-1] - sizes[4] < one_job, sizes  # it stopped growing: freed pages are reused (or returned)
    assert JobStore(settings.jobs_path).queries(job_id) == []  # the questions are gone, the job is not


def test_one_keys_job_does_not_block_another_keys_and_resumes_on_its_own_pipeline(demo_pipeline, tmp_path, reference):
    """Issue 50, fault 7: one FIFO worker ran a key's whole job before another key's. Through a real server, with
    FEDQA_JOBS_SLICE_S=0: key A's job pauses after the question in flight as soon as key B's job waits (queued, its
    finished questions kept), B's job runs to the end while A's waits, and A's job then resumes on the pipeline it
    started with though a reload swapped in other versions meanwhile, to the numbers of an uninterrupted run."""
    ref_summary, _ = reference
    mini, strategies = _mini(), SPEC.strategies
    a_hold, b_hold = _Hold(mini[5]["query"]), _Hold("Who may export the audit log?")

    class Held(_SharedPipeline):
        def retrieve(self, query: str, **kwargs):  # noqa: ANN003, ANN201
            for hold in (a_hold, b_hold):
                if query == hold.query and not hold.held.is_set():
                    hold.held.set()
                    assert hold.release.wait(120), "the test never released the held question"
            return super().retrieve(query, **kwargs)

    class Reloaded(Held):
        @property
        def versions(self) -> dict:
            return {**super().versions, "router": "router-reloaded"}

    reloaded = threading.Event()

    def loader(s, backend=None, **_):  # noqa: ANN001, ANN003, ANN202
        kind = Reloaded if reloaded.is_set() else Held
        return kind(s, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=demo_pipeline.store, lexical=demo_pipeline.lexical)

    home = tmp_path / "home"
    _put_mini(home)
    settings = make_settings(home, api_keys="key-a,key-b", rate_limit_per_minute=0, jobs_slice_s=0)
    state = ServiceState(settings, loader=loader)
    with (
        served_app(create_app(settings, state), lifespan="on") as url,
        httpx.Client(base_url=url, timeout=120, headers={"X-API-Key": "key-a"}) as a,
        httpx.Client(base_url=url, timeout=120, headers={"X-API-Key": "key-b"}) as b,
    ):
        r = a.post("/evaluate", json={"dataset": "mini", **SPEC.model_dump(include={"strategies", "metrics"})})
        assert r.status_code == 202, r.text
        a_job, total = r.json()["id"], r.json()["progress"]["total"]
        assert a_hold.held.wait(120), "A's job never reached its held question"
        r = b.post("/evaluate", json={"queries": [{"query": b_hold.query, "domains": []}], "strategies": ["uis"], "metrics": ["retrieval"]})
        assert r.status_code == 202, r.text
        b_job = r.json()["id"]
        a_hold.release.set()
        assert b_hold.held.wait(120), ("B's job never started", a.get(f"/evaluate/{a_job}").json(), b.get(f"/evaluate/{b_job}").json())
        paused = _wait(a, a_job, lambda body: True)
        assert paused["status"] == "queued" and paused["progress"]["done"] == 5 * len(strategies) + 1, paused  # after the question in flight
        reloaded.set()
        state.load()  # a reload to other versions while A's job waits
        assert present(state.pipeline).versions["router"] == "router-reloaded"
        b_hold.release.set()
        _wait(b, b_job, lambda body: body["status"] == "done")  # B's job did not wait for the whole of A's
        done = _wait(a, a_job, lambda body: body["status"] in ("done", "failed"), interval=0.1)
    assert done["status"] == "done", done["error"]
    assert done["progress"] == {"done": total, "total": total}
    assert done["results"]["results"] == ref_summary["results"]  # paused and resumed: the numbers of one uninterrupted run
    assert done["results"]["versions"]["router"] != "router-reloaded"  # on the pipeline it started with
