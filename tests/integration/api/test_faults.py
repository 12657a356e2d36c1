"""Fault behaviour at start-up and mid-request (LLM down and store unreachable at request time are in test_api.py).

Documented behaviour (README, Operations): a model file missing at start-up leaves the process
up (/healthz 200) but not ready: /readyz 503 naming the missing file, /ask 503 with the same cause.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.artifacts import Registry
from service.config import Settings
from service.files import copytree_sparse
from service.pipeline import Pipeline
from service.retrieval.passage import Hit, Passage
from service.retrieval.store import Store, StoreUnavailable
from tests.conftest import make_settings
from tests.utils import present

Q = {"query": "How do refunds work?", "generate": False}


@pytest.fixture
def home_copy(demo_home: Path, tmp_path: Path) -> Path:
    """A private copy of the demo home (the embedded store locks a version per process)."""
    dst = tmp_path / "home"
    copytree_sparse(demo_home, dst)
    return dst


def _not_ready(settings, expected: str) -> None:
    with TestClient(create_app(settings)) as c:  # lifespan runs and fails to load
        assert c.get("/healthz").status_code == 200
        ready = c.get("/readyz")
        assert ready.status_code == 503 and expected in ready.json()["detail"], ready.text
        r = c.post("/ask", json=Q)
        assert r.status_code == 503 and expected in r.json()["detail"], r.text
        assert r.headers["retry-after"]
        assert "fedqa_ready 0.0" in c.get("/metrics").text


def test_encoder_model_path_missing_at_startup(tmp_path):
    missing = tmp_path / "no-such-minilm"
    settings = make_settings(tmp_path, encoder_model=str(missing))
    # An empty home fails on the index first; give it an index manifest so the encoder is what is missing.
    reg = Registry(settings.home_dir)
    version = reg.new_version("index")
    reg.complete("index", version, {"retriever": "base", "domains": {}})
    reg.activate("index", version)
    _not_ready(settings, str(missing))


def test_router_weights_deleted_at_startup(home_copy):
    reg = Registry(home_copy)
    router_dir = reg.path("router", present(reg.active()["router"]))
    (router_dir / "head.safetensors").unlink()
    _not_ready(make_settings(home_copy), str(router_dir / "head.safetensors"))


def test_encoder_weights_deleted_at_startup(home_copy, encoder, tmp_path):
    model = tmp_path / "minilm"
    shutil.copytree(encoder.path, model, ignore=shutil.ignore_patterns("model.safetensors"))
    _not_ready(make_settings(home_copy, encoder_model=str(model)), "encoder model weights missing")


def test_llm_that_cannot_start_still_serves_sources(home_copy):
    settings = Settings(home=home_copy, cache=home_copy / "cache", llm_backend="openai", llm_base_url=None)  # no base URL: the backend cannot start
    with TestClient(create_app(settings)) as c:
        ready = c.get("/readyz").json()
        assert ready["status"] == "ready" and any("LLM backend could not start" in w for w in ready["warnings"])
        body = c.post("/ask", json={"query": "How do refunds work?"}).json()
        assert body["sources"] and body["answer_mode"] == "extractive"
        assert "LLM backend could not start" in body["error"]


class _FailingStore:
    """The demo store, failing on search the way a lost Qdrant connection (or a bug) would; it reads the rest from
    the demo store, writes nothing and leaves it open."""

    def __init__(self, store: Store, exc: Exception) -> None:
        self._store, self._exc = store, exc
        self.backend, self.version = store.backend, store.version

    def domains(self) -> list[str]:
        return self._store.domains()

    def count(self, domain: str) -> int:
        return self._store.count(domain)

    def search(self, domain: str, vector: np.ndarray, limit: int) -> list[Hit]:
        raise self._exc

    def passages(self, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        return self._store.passages(domain, point_ids)

    def iter_passages(self, domain: str) -> Iterator[Passage]:
        return self._store.iter_passages(domain)

    def create_domain(self, domain: str, dim: int) -> None:
        raise AssertionError("a test store is read-only")

    def upsert(self, domain: str, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        raise AssertionError("a test store is read-only")

    def delete(self, domain: str, doc_ids: Sequence[str]) -> None:
        raise AssertionError("a test store is read-only")

    def finish(self) -> None:
        raise AssertionError("a test store is read-only")

    def close(self) -> None:
        pass


def _failing_client(demo_pipeline, exc: Exception) -> TestClient:
    from service.api.state import ServiceState

    settings = make_settings(demo_pipeline.settings.home_dir)
    pipeline = Pipeline(settings, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=_FailingStore(demo_pipeline.store, exc))
    state = ServiceState(settings)
    state.pipeline = pipeline
    return TestClient(create_app(settings, state), raise_server_exceptions=False)


def test_store_lost_mid_request_is_503(demo_pipeline):
    c = _failing_client(demo_pipeline, StoreUnavailable("Qdrant did not answer (search): ConnectError"))
    r = c.post("/ask", json=Q)
    assert r.status_code == 503 and "search store unavailable" in r.json()["detail"]
    assert r.headers["x-request-id"]


def test_unexpected_error_is_500_without_traceback_and_with_request_id(demo_pipeline, caplog):
    c = _failing_client(demo_pipeline, RuntimeError("boom"))
    r = c.post("/ask", json=Q, headers={"X-Request-ID": "fault-1"})
    assert r.status_code == 500
    assert r.headers["x-request-id"] == "fault-1" and "fault-1" in r.json()["detail"]
    assert "Traceback" not in r.text and "boom" not in r.text
    assert 'route="/ask",status="500"' in c.get("/metrics").text
    assert any(getattr(rec, "request_id", None) == "fault-1" and rec.exc_info for rec in caplog.records)


def test_store_lost_before_a_stream_starts_is_503_not_a_broken_stream(demo_pipeline):
    c = _failing_client(demo_pipeline, StoreUnavailable("Qdrant did not answer (search): ConnectError"))
    r = c.post("/ask", json={**Q, "stream": True})
    assert r.status_code == 503 and r.headers["content-type"].startswith("application/json")


class _BrokenLLM:
    name = "broken"

    def complete(self, *args, **kwargs):
        raise RuntimeError("kaboom")

    def stream(self, *args, **kwargs):
        yield "Partial"
        raise RuntimeError("kaboom")


def test_failure_after_a_stream_started_ends_it_with_an_error_event(demo_pipeline):
    from service.api.state import ServiceState

    settings = make_settings(demo_pipeline.settings.home_dir)
    pipeline = Pipeline(settings, router=demo_pipeline.router, encoder=demo_pipeline.encoder, store=demo_pipeline.store, llm=_BrokenLLM())
    state = ServiceState(settings)
    state.pipeline = pipeline
    c = TestClient(create_app(settings, state))
    with c.stream("POST", "/ask", json={"query": "How do refunds work?", "stream": True}) as r:
        assert r.status_code == 200
        raw = "".join(r.iter_text())
    names = [block.split("\n")[0].removeprefix("event: ") for block in raw.strip().split("\n\n")]
    assert names[0] == "retrieval" and names[-1] == "error"
    assert '"status": 500' in raw and "kaboom" not in raw
