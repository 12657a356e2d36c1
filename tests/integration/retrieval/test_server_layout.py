"""The Qdrant server layout through qdrant-client's local mode: one collection per vector space whatever the
number of products or versions, writes proportional to what changed, domain-filtered searches, atomic versions."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient

from indexes.ingest import ingest
from service.artifacts import Registry
from service.retrieval.client_layout import Topology, cluster_topology
from service.retrieval.client_store import ClientBackend
from service.retrieval.passage import Passage
from tests.conftest import make_settings
from tests.utils import ROOT, present

DIM = 16


class Observed(QdrantClient):
    """The real local-mode client; every passage point it is asked to write (upserts, payload changes) is counted."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.written: Counter[str] = Counter()
        self.created: list[dict[str, Any]] = []

    # The overrides take any arguments (so they stay compatible with the client's long signatures) and read them
    # by name, as the client's own method binds them.
    def upsert(self, *args: Any, **kw: Any) -> Any:
        a = _bound(QdrantClient.upsert, self, *args, **kw)
        self.written["upsert"] += len(a["points"]) if "space" in a["collection_name"] else 0
        return super().upsert(*args, **kw)

    def set_payload(self, *args: Any, **kw: Any) -> Any:
        a = _bound(QdrantClient.set_payload, self, *args, **kw)
        self.written["set_payload"] += len(a["points"]) if "space" in a["collection_name"] else 0
        return super().set_payload(*args, **kw)

    def create_collection(self, *args: Any, **kw: Any) -> Any:
        a = _bound(QdrantClient.create_collection, self, *args, **kw)
        others = {k: v for k, v in a.items() if k not in ("self", "collection_name", "vectors_config", "kwargs")}
        self.created.append({"name": a["collection_name"], **others, **a.get("kwargs", {})})
        return super().create_collection(*args, **kw)


def _bound(method: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
    """A call's arguments by parameter name, as ``method`` binds them."""
    return dict(inspect.signature(method).bind(*args, **kw).arguments)


def _passages(domains: int, per: int, tag: str = "") -> list[Passage]:
    return [
        Passage(f"p{d}/page{i}#000", f"product-{d}", f"Page {i}", f"p{d}/page{i}.md", f"text {i}{tag}") for d in range(domains) for i in range(per)
    ]


def _vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _fill(store, passages: list[Passage], vectors: np.ndarray) -> None:
    for domain in sorted({p.domain for p in passages}):
        idx = [i for i, p in enumerate(passages) if p.domain == domain]
        store.create_domain(domain, DIM)
        store.upsert(domain, [passages[i] for i in idx], vectors[idx])
    store.finish()


def test_one_collection_per_vector_space_whatever_the_products_and_versions():
    client = Observed(location=":memory:")
    backend = ClientBackend(client)
    for version, products in (("v1", 3), ("v2", 40)):
        store = backend.open(version, create=True)
        _fill(store, _passages(products, 4), _vectors(products * 4, 0))
        assert len(store.domains()) == products
    names = {c.name for c in client.get_collections().collections}
    assert len(names) == 4  # two vector spaces (v2 was built from nothing), the version records and the serving leases
    for i in range(3, 9):  # six more versions built on v2: no collection added
        backend.clone(f"v{i - 1}", f"v{i}")
    assert {c.name for c in client.get_collections().collections} == names
    assert backend.open("v8").count("product-39") == 4 and backend.versions() == ["v1", "v2", *(f"v{i}" for i in range(3, 9))]
    backend.drop("v1")  # the last version of its space: the collection goes with it
    assert len(client.get_collections().collections) == 3


def test_a_search_with_a_domain_filter_returns_only_that_domain():
    backend = ClientBackend(QdrantClient(location=":memory:"))
    passages, vectors = _passages(5, 30), _vectors(150, 1)
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    for i in (0, 45, 149):
        other = next(d for d in store.domains() if d != passages[i].domain)
        hits = store.search(other, vectors[i], 20)  # the query is a passage of another product
        assert len(hits) == 20
        found = store.passages(other, [h.point_id for h in hits])
        assert set(found) == {h.point_id for h in hits} and {p.domain for p in found.values()} == {other}
        own = store.search(passages[i].domain, vectors[i], 1)[0]
        assert own.point_id == passages[i].point_id and own.score == pytest.approx(1.0, abs=2e-3)


def _write_site(root: Path, pages: int, extra: str = "") -> None:
    for product in ("orbit", "ledger"):
        (root / product).mkdir(parents=True, exist_ok=True)
        for i in range(pages):
            tail = extra if (product, i) == ("orbit", 0) else ""
            body = "\n\n".join(f"## Part {j}\n\n{product} page {i} part {j} explains setting {j * 7 + i}.{tail}" for j in range(3))
            (root / product / f"page{i}.md").write_text(f"# Page {i}\n\n{body}\n", encoding="utf-8")


def test_a_reingest_that_changes_one_page_writes_only_that_pages_points(tmp_path, encoder):
    client = Observed(location=":memory:")
    backend = ClientBackend(client)
    settings = make_settings(tmp_path / "home", min_passage_chars=0)  # a passage a section
    site = tmp_path / "site"
    _write_site(site, pages=6)
    first = ingest([site], settings, backend=backend, encoder=encoder, progress=False)
    total = sum(first.domains.values())
    assert total == 2 * 6 * 3 and client.written["upsert"] == total  # every passage once

    client.written.clear()
    _write_site(site, pages=6, extra=" Changed in release 2.")  # one page: its three passages change
    second = ingest([site], settings, backend=backend, encoder=encoder, progress=False)
    assert second.changed and second.updated == 3 and sum(second.domains.values()) == total
    assert client.written["upsert"] == 3 and client.written["set_payload"] == 3  # 3 new points, 3 old ones retired
    assert len(client.get_collections().collections) == 3  # the space, the version records, the serving leases

    old, new = backend.open(present(first.version)), backend.open(present(second.version))
    changed = {p.doc_id for p in new.iter_passages("orbit") if "release 2" in p.text}
    assert len(changed) == 3 and not any("release 2" in p.text for p in old.iter_passages("orbit"))  # the old version is intact
    assert Registry(settings.home_dir).active()["index"] == second.version


_KILLED_BUILD = r"""
import os, signal, sys
import numpy as np
from qdrant_client import QdrantClient
from service.retrieval.client_store import ClientBackend
from service.retrieval.passage import Passage
backend = ClientBackend(QdrantClient(path=sys.argv[1]))
backend.clone("v1", "v2")
store = backend.open("v2", create=True)
victims = [p for p in store.iter_passages("product-0")][:5]
store.delete("product-0", [p.doc_id for p in victims[:2]])
rewritten = [Passage(p.doc_id, p.domain, p.title, p.source, "rewritten") for p in victims[2:]]
store.upsert("product-0", rewritten, np.ones((3, 16), dtype=np.float32) / 4)
store.create_domain("product-new", 16)
store.upsert("product-new", [Passage("n#0", "product-new", "N", "n.md", "new")], np.ones((1, 16), dtype=np.float32) / 4)
os.kill(os.getpid(), signal.SIGKILL)  # killed before the build completes
"""


def _snapshot(store, queries: np.ndarray) -> dict:
    return {
        "domains": store.domains(),
        "counts": {d: store.count(d) for d in store.domains()},
        "texts": {d: sorted(p.text for p in store.iter_passages(d)) for d in store.domains()},
        "hits": [[(h.point_id, round(h.score, 4)) for h in store.search(d, q, 10)] for d in store.domains() for q in queries],
    }


def test_a_killed_build_changes_nothing_and_its_leftovers_are_pruned(tmp_path):
    path = str(tmp_path / "qdrant")
    backend = ClientBackend(QdrantClient(path=path))
    _fill(backend.open("v1", create=True), _passages(3, 20), _vectors(60, 2))
    queries = _vectors(4, 3)
    before = _snapshot(backend.open("v1"), queries)
    backend.client.close()

    done = subprocess.run([sys.executable, "-c", _KILLED_BUILD, path], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr

    backend = ClientBackend(QdrantClient(path=path))
    assert _snapshot(backend.open("v1"), queries) == before  # the serving version saw none of the killed build's writes
    assert backend.versions() == ["v1", "v2"]  # the leftover, listed for pruning
    backend.drop("v2")
    assert backend.versions() == ["v1"] and _snapshot(backend.open("v1"), queries) == before
    assert backend.client.count(backend.open("v1").record.collection).count == 60  # the leftover points are gone
    backend.client.close()


def test_collections_are_replicated_as_the_topology_says():
    client = Observed(location=":memory:")
    store = ClientBackend(client, topology=Topology(replication_factor=2, shard_number=3)).open("v1", create=True)
    store.create_domain("orbit", DIM)
    assert [(c["replication_factor"], c["shard_number"]) for c in client.created if "space" in c["name"]] == [(2, 3)]
    assert all(c["replication_factor"] == 2 for c in client.created)


@pytest.mark.parametrize(("peers", "expected"), [(3, 2), (1, 1), (0, 1)])
def test_an_unset_replication_factor_is_two_on_a_cluster(peers, expected):
    """A real HTTP server answering Qdrant's GET /cluster as a cluster of ``peers`` nodes (0: clustering off)."""
    status = {"status": "disabled"} if peers == 0 else {
        "status": "enabled", "peer_id": 1, "peers": {str(i + 1): {"uri": f"http://q{i}:6335"} for i in range(peers)},
        "raft_info": {"term": 1, "commit": 1, "pending_operations": 0, "leader": 1, "role": "Leader", "is_voter": True},
        "consensus_thread_status": {"consensus_thread_status": "working", "last_update": "2026-01-01T00:00:00Z"},
        "message_send_failures": {},
    }  # fmt: skip

    class Cluster(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"result": status, "status": "ok", "time": 0.0}).encode()
            self.send_response(200 if self.path == "/cluster" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Cluster)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = QdrantClient(url=f"http://127.0.0.1:{server.server_port}", prefer_grpc=False, timeout=2, check_compatibility=False)
        assert cluster_topology(client, None, None).replication_factor == expected
        assert cluster_topology(client, 3, None).replication_factor == 3  # the setting wins
    finally:
        server.shutdown()
