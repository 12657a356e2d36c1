"""Serving leases on a Qdrant server: ``fedqa index prune`` sees the index versions other processes answer from.

qdrant-client's local mode (``:memory:``) stands in for the server; it can be shared only inside one process, so
the "replica" and the prune share one backend object, as two pods share one Qdrant deployment (their own leases
are all they know of each other: the client store has no process lock to find).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from qdrant_client import QdrantClient

from indexes.ingest import ingest
from indexes.prune import prune_indexes
from service.artifacts import Registry
from service.loading import load_pipeline
from service.retrieval.client_leases import LEASES
from service.retrieval.client_store import ClientBackend
from tests.conftest import make_settings
from tests.utils import present


def _ingest_versions(tmp_path, settings, backend, encoder, releases: range) -> list[str]:
    docs = tmp_path / "docs.jsonl"
    versions = []
    for i in releases:
        rows = [{"doc_id": f"{d}#0", "domain": d, "text": f"Release {i} of {d} ships in spring."} for d in ("orbit", "ledger")]
        docs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        versions.append(present(ingest([docs], settings, backend=backend, encoder=encoder, progress=False).version))
    return versions


def test_prune_keeps_a_version_another_process_serves_until_its_lease_lapses(tmp_path, encoder):
    """Issue 50, "Reliability and security 3": on a Qdrant server prune could not see which versions other
    pods serve, and removed the one a replica (not reloaded since two ingests) still answered from. Now the replica's
    pipeline leases its version; prune keeps it while the lease is fresh, and removes it once the lease has lapsed
    (a killed pod) or was given back (the pipeline closed)."""
    settings = make_settings(tmp_path / "home", qdrant_url=":memory:", sentence_vectors_precompute=0, serve_lease_s=60)
    backend = ClientBackend(QdrantClient(location=":memory:"), lease_s=settings.serve_lease_s)
    served = _ingest_versions(tmp_path, settings, backend, encoder, range(1))[0]
    replica = load_pipeline(settings, backend, with_llm=False)  # a replica serving the version active now
    try:
        middle, newest = _ingest_versions(tmp_path, settings, backend, encoder, range(1, 3))
        assert Registry(settings.home_dir).active()["index"] == newest and replica.store.version == served

        report = prune_indexes(settings, 1, backend=backend)
        assert report.removed == [middle]
        assert report.kept[newest] == "active" and report.kept[served].startswith("serving lease of ")
        assert replica.retrieve("When does orbit ship?", top_k=1, strategy="uis").hits  # still answers from it

        lapsed = time.time() + settings.serve_lease_s + 1  # the replica was killed: nothing renews its lease
        assert prune_indexes(settings, 1, backend=backend, dry_run=True, now=lapsed).removed == [served]
    finally:
        replica.close()
    assert backend.leases() == []  # closed: the lease is given back at once
    assert prune_indexes(settings, 1, backend=backend).removed == [served]
    assert backend.versions() == [newest]
    backend.close()


def test_leases_are_counted_renewed_and_lapse(tmp_path):
    """Two stores of one version in one process hold one lease until both are closed; a renewal moves its end on;
    another process's lease that nobody renews lapses at its end."""
    now = [1000.0]
    backend = ClientBackend(QdrantClient(location=":memory:"), lease_s=30)
    backend.keeper.clock = lambda: now[0]
    backend.records.put(_record("v1"))
    first, second = backend.open("v1", serving=True), backend.open("v1", serving=True)
    assert [(lease.version, lease.expires) for lease in backend.leases()] == [("v1", 1030.0)]
    now[0] = 1020.0
    backend.keeper.renew()
    assert [lease.expires for lease in backend.leases()] == [1050.0]
    first.close()
    first.close()  # closing twice gives one hold back
    assert [lease.version for lease in backend.leases()] == ["v1"]
    second.close()
    assert backend.leases() == []

    other = ClientBackend(backend.client, lease_s=30)  # another process on the same deployment
    other.keeper.clock = lambda: 2000.0
    other.open("v1", serving=True)
    lease = backend.leases()[0]
    assert lease.holder == other.keeper.holder != backend.keeper.holder
    assert lease.fresh(2029.0) and not lease.fresh(2030.0)
    backend.drop("v1")  # the other process was killed: its lapsed lease goes with the version
    assert backend.leases() == []
    other.keeper.close()
    backend.close()


class _ReadOnly(QdrantClient):
    """The local-mode client with a read-only key's answer to every write of the lease collection."""

    def upsert(self, collection_name: str, *args: Any, **kwargs: Any) -> Any:
        if collection_name.endswith(LEASES):
            raise PermissionError("403 Forbidden: read-only access")
        return super().upsert(collection_name, *args, **kwargs)


def test_a_lease_that_cannot_be_written_is_logged_once_and_serving_goes_on(caplog):
    client = _ReadOnly(location=":memory:")
    backend = ClientBackend(client, lease_client=client)
    backend.records.put(_record("v1"))
    with caplog.at_level(logging.WARNING, logger="fedqa.store"):
        store = backend.open("v1", serving=True)
        backend.keeper.renew()
    assert store.domains() == [] and backend.leases() == []
    warnings = [r.getMessage() for r in caplog.records if r.name == "fedqa.store"]
    assert len(warnings) == 1 and "FEDQA_QDRANT_LEASE_API_KEY" in warnings[0]
    store.close()
    backend.close()


def test_the_embedded_store_records_no_lease(tmp_path):
    from service.retrieval.edge_store import EdgeBackend

    backend = EdgeBackend(Registry(tmp_path))
    backend.open("index-1", create=True, serving=True).close()
    assert backend.leases() == []


def _record(version: str) -> Any:
    from service.retrieval.client_layout import VersionRecord

    return VersionRecord(version=version, collection=f"fedqa_space_{version}", lineage=[version])
