"""/admin/reload under load: requests, streams and an evaluation job in flight keep their pipeline.

The service runs under uvicorn on loopback (real HTTP, as Locust drives it). Every reload opens a new
index version (a real qdrant-edge copy of the demo index), so the previous pipeline's search threads
and its store are both released on the way out: only when their last user is done.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from service.artifacts import Registry
from service.files import copytree_sparse
from service.pipeline import Pipeline
from service.retrieval.edge_store import EdgeBackend
from service.retrieval.store import StoreError
from tests.utils import make_settings, present, served_app, wait_until

ADMIN = {"Authorization": "Bearer admin-secret"}
DURATION_S = 4.0


def _cloning_loader(demo_home, demo_pipeline, tmp_path) -> tuple[Path, Callable[..., Pipeline], list[Pipeline]]:  # noqa: ANN001
    """A copy of the demo home, a pipeline loader that opens a fresh clone of its index each time (a new
    version, so the previous pipeline's store must be closed), and the list of the pipelines it loaded."""
    home = tmp_path / "home"
    copytree_sparse(demo_home, home)
    registry = Registry(home)
    backend = EdgeBackend(registry)
    base = present(registry.active()["index"])
    loaded: list[Pipeline] = []
    counter = itertools.count()

    def loader(settings, backend_=None, store=None):  # noqa: ANN001 - ServiceState's loader signature
        version = f"{base}-reload{next(counter)}"
        backend.clone(base, version)
        p = Pipeline(settings, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=backend.open(version))
        loaded.append(p)
        return p

    return home, loader, loaded


@pytest.fixture()
def served(demo_home, demo_pipeline, tmp_path):
    """The app on a copy of the demo home; each load opens a fresh copy of the index (a new version)."""
    home, loader, loaded = _cloning_loader(demo_home, demo_pipeline, tmp_path)
    settings = make_settings(home, admin_key="admin-secret", rate_limit_per_minute=0)
    state = ServiceState(settings, loader=loader)
    with served_app(create_app(settings, state), lifespan="auto") as url:
        yield url, state, loaded


def _burst(url: str, stop: threading.Event, errors: list[str], counts: dict[str, int], lock: threading.Lock, k: int) -> None:
    bodies = [
        ("ask-uis", {"query": "How do I enforce SSO for my CRM users?", "strategy": "uis", "generate": False}),
        ("ask-stochastic", {"query": "refund an invoice and export the contacts", "gate": "stochastic", "seed": 3}),
        ("stream", {"query": "How do I create a survey?", "strategy": "uis", "stream": True}),
    ]
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in itertools.count(k):
            if stop.is_set():
                return
            name, body = bodies[i % len(bodies)]
            r = client.post("/ask", json=body)
            ok = r.status_code == 200
            if ok and name == "stream":
                events = [line.split(": ", 1)[1] for line in r.text.splitlines() if line.startswith("event: ")]
                ok = events[0] == "retrieval" and events[-1] == "done" and "error" not in events
            elif ok:
                ok = len(r.json()["sources"]) > 0
            with lock:
                counts[name] = counts.get(name, 0) + 1
                if not ok:
                    errors.append(f"{name}: HTTP {r.status_code} {r.text[:300]}")


def test_reload_during_a_burst_of_requests_streams_and_a_job_loses_nothing(served):
    url, state, loaded = served
    errors: list[str] = []
    counts: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    with httpx.Client(base_url=url, timeout=60) as client:
        job = client.post("/evaluate", json={"dataset": "demo", "strategies": ["uis", "mkpqa", "rfs"], "limit": 60})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        users = [threading.Thread(target=_burst, args=(url, stop, errors, counts, lock, k)) for k in range(4)]
        for t in users:
            t.start()
        reloads: list[float] = []
        t0 = time.monotonic()
        while (
            (time.monotonic() - t0 < DURATION_S or len(reloads) < 8 or sum(counts.values()) < 24)
            and time.monotonic() - t0 < 180
            and len(reloads) < 60
        ):
            r = client.post("/admin/reload", headers=ADMIN)
            reloads.append(r.status_code)
            time.sleep(0.15)
        stop.set()
        for t in users:
            t.join(60)
        t0, more = time.monotonic(), 0
        while (body := client.get(f"/evaluate/{job_id}").json())["status"] in ("queued", "running"):
            assert time.monotonic() - t0 < 120, body
            if more < 10:  # reloads keep coming while the job runs (bounded: each one clones the index on disk)
                client.post("/admin/reload", headers=ADMIN)
                more += 1
            time.sleep(0.3)

    assert errors == [], f"{len(errors)} of {sum(counts.values())} requests failed: {errors[:3]}"
    assert sum(counts.values()) >= 24 and set(counts) == {"ask-uis", "ask-stochastic", "stream"}
    assert len(reloads) >= 8 and set(reloads) == {200}
    assert body["status"] == "done", body
    assert body["progress"]["done"] == body["progress"]["total"]
    # The job's numbers come from the one pipeline it started with, though the service reloaded under it.
    assert body["results"]["versions"]["index"] in [p.store.version for p in loaded]
    assert body["results"]["versions"]["index"] != state.pipeline.store.version
    # Every replaced pipeline was released once its users were done: threads shut down, nothing left over.
    wait_until(lambda: not state._retired, 30)  # the job gives its lease back just after it finishes
    assert state._retired == {}
    # a release closes the pipeline after its sentence warm-up stops at its next batch
    assert wait_until(lambda: all(p._pool._shutdown for p in loaded if p is not state.pipeline), 60)
    assert not state.pipeline._pool._shutdown


def test_a_lease_keeps_the_old_pipeline_open_until_it_is_given_back(demo_home, demo_pipeline, tmp_path):
    home, loader, _ = _cloning_loader(demo_home, demo_pipeline, tmp_path)
    state = ServiceState(make_settings(home), loader=loader)
    state.load()
    first = present(state.pipeline)
    vector = demo_pipeline.encoder.embed_query("refund a payment")
    with state.lease() as held:
        assert held is first
        state.load()  # a new index version: the old store would be closed now, under the lease
        assert state.pipeline is not first and state.in_use(first) == 1
        hits = held.retrieve("refund a payment", top_k=3, strategy="uis").hits  # the pool and the store still work
        assert len(hits) == 3 and held.store.search("ledger", vector, 1)
    assert first._pool._shutdown and state.in_use(first) == 0
    with pytest.raises(StoreError):
        first.store.search("ledger", vector, 1)  # closed once the lease was given back
    second = present(state.pipeline)
    state.close()
    assert second._pool._shutdown
    assert json.dumps(state._retired) == "{}"


def test_reloads_on_a_qdrant_server_share_one_client_closed_with_the_service(tmp_path, encoder, monkeypatch):
    """Issue 28, fault 13: every load opened a new QdrantClient (a connection pool) that nothing closed. Now the
    service opens one backend at its first load, every reload (index version changed or not) uses it, and it is
    closed with the service once the last pipeline is released. qdrant-client's local mode (``:memory:``) stands
    in for the server: the same client class and the same backend code."""
    from qdrant_client import QdrantClient

    from service.retrieval.passage import Passage

    opened: list[QdrantClient] = []
    closed: list[QdrantClient] = []
    init, close = QdrantClient.__init__, QdrantClient.close

    def counting_init(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        opened.append(self)
        init(self, *args, **kwargs)

    def counting_close(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        closed.append(self)
        return close(self, *args, **kwargs)

    monkeypatch.setattr(QdrantClient, "__init__", counting_init)
    monkeypatch.setattr(QdrantClient, "close", counting_close)
    settings = make_settings(tmp_path, qdrant_url=":memory:", sentence_vectors_precompute=0)
    registry = Registry(settings.home_dir)
    passages = [
        Passage(f"{d}/page#00{i}", d, f"{d} page {i}", f"{d}/page.md", f"How to use feature {i} of {d}.") for d in ("alpha", "beta") for i in range(3)
    ]

    def new_index() -> str:
        version = registry.new_version("index")
        registry.complete("index", version, {"retriever": "base", "domains": {"alpha": 3, "beta": 3}})
        registry.activate("index", version)
        return version

    state = ServiceState(settings)
    first = new_index()
    state.load()  # the index is not on the server yet: not ready, and no client left behind
    state.load()
    assert state.pipeline is None and "not on the Qdrant deployment" in (state.error or "")
    assert len(opened) == 1, f"{len(opened)} QdrantClients for two loads"

    def put(version: str) -> None:  # write the index version's collections on the "server"
        store = present(state.backend).open(version, create=True)
        vectors = encoder.embed_passages([p.text for p in passages])
        for d in ("alpha", "beta"):
            store.create_domain(d, vectors.shape[1])
            store.upsert(d, [p for p in passages if p.domain == d], vectors[[i for i, p in enumerate(passages) if p.domain == d]])

    put(first)
    state.load()
    assert state.pipeline is not None and state.pipeline.store.version == first, state.error
    for _ in range(3):  # reloads that change the index version
        put(new_index())
        state.load()
        assert state.pipeline.store.version == registry.active()["index"]
        assert state.pipeline.retrieve("feature 2 of beta", top_k=2, strategy="uis").hits
    assert len(opened) == 1 and closed == []
    state.close()
    assert closed == opened
