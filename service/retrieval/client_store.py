"""Store on a Qdrant server or cluster through qdrant-client (``:memory:`` runs its local mode).

The layout (service.retrieval.client_layout): one collection per vector space, products partitioned by the
tenant-indexed ``domain`` payload key, index versions as lineages of payload marks, so an ingest writes only the
passages that changed and the number of collections depends on neither the products nor the versions kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from qdrant_client import QdrantClient, models

from service.retrieval.client_layout import (
    BORN,
    DEAD,
    PID,
    Records,
    Topology,
    VersionRecord,
    cluster_topology,
    in_domain,
    physical_id,
    unseen,
)
from service.retrieval.client_leases import LeaseBook, LeaseKeeper, create_lease_collection
from service.retrieval.passage import Hit, Passage, point_id
from service.retrieval.store import StoreError, StoreUnavailable, VersionLease

_BATCH = 256
# Keyword indexes of a space collection; `domain` is the tenant key: Qdrant keeps each product's points together
# on disk and builds one HNSW graph per product (payload_m) instead of a global one (m=0), as its multitenancy
# guide advises; every search is filtered by one product.
_KEYWORDS = (PID, BORN, DEAD, "doc_id", "source")
_HNSW = models.HnswConfigDiff(m=0, payload_m=16)


def _unavailable(exc: Exception, what: str) -> StoreUnavailable:
    return StoreUnavailable(f"Qdrant did not answer ({what}): {type(exc).__name__}")


def _has(*conditions: tuple[str, list[str]]) -> list[models.Condition]:
    return [models.FieldCondition(key=key, match=models.MatchAny(any=values)) for key, values in conditions]


class ClientStore:
    """One index version: the points of its space collection that its lineage sees."""

    backend = "qdrant-client"

    def __init__(
        self, client: QdrantClient, records: Records, record: VersionRecord, topology: Topology, on_close: Callable[[], None] | None = None
    ) -> None:
        self.client = client
        self.records = records
        self.record = record
        self.topology = topology
        self.version = record.version
        self._on_close = on_close  # gives the serving lease back (ClientBackend.open)

    def _filter(self, domain: str, *extra: models.Condition) -> models.Filter:
        return in_domain(self.record.lineage, domain, *extra)

    def _known(self, domain: str) -> None:
        if domain not in self.record.domains:
            raise StoreError(f"unknown domain {domain!r} in index {self.version}")

    def domains(self) -> list[str]:
        return sorted(self.record.domains)

    def count(self, domain: str) -> int:
        self._known(domain)
        try:
            return int(self.client.count(self.record.collection, count_filter=self._filter(domain), exact=True).count)
        except Exception as exc:
            raise _unavailable(exc, f"count {domain}") from exc

    def create_domain(self, domain: str, dim: int) -> None:
        if self.record.dim is not None and self.record.dim != dim:
            raise StoreError(f"index {self.version} holds {self.record.dim}-d vectors, not {dim}-d")
        if not self.client.collection_exists(self.record.collection):
            self._create_space(dim)
        if domain in self.record.domains and self.record.dim == dim:
            return
        self.record.dim = dim
        self.record.domains = sorted({*self.record.domains, domain})
        self.records.put(self.record)

    def _create_space(self, dim: int) -> None:
        """The space collection: float16 vectors (as the embedded store), replicated as the topology says."""
        name = self.record.collection
        vectors = models.VectorParams(size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16)
        self.client.create_collection(
            name,
            vectors_config=vectors,
            hnsw_config=_HNSW,
            replication_factor=self.topology.replication_factor,
            shard_number=self.topology.shard_number,
        )
        tenant = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        self.client.create_payload_index(name, field_name="domain", field_schema=tenant)
        for key in _KEYWORDS:
            self.client.create_payload_index(name, field_name=key, field_schema=models.PayloadSchemaType.KEYWORD)

    def _retire(self, domain: str, pids: list[str]) -> None:
        """Mark the points of ``pids`` this version sees from its base as dead in this version (their earlier
        versions still see them); points this version wrote itself are overwritten or deleted instead."""
        marks: dict[tuple[str, ...], list[models.ExtendedPointId]] = defaultdict(list)
        for i in range(0, len(pids), _BATCH):
            chunk = pids[i : i + _BATCH]
            where = self._filter(domain, *_has((PID, chunk)))
            where.must_not = [models.FieldCondition(key=BORN, match=models.MatchValue(value=self.version))]
            records, _ = self.client.scroll(self.record.collection, scroll_filter=where, limit=len(chunk) * 2, with_payload=[DEAD])
            for r in records:
                marks[tuple((r.payload or {}).get(DEAD) or [])].append(str(r.id))
        for dead, ids in marks.items():
            self.client.set_payload(self.record.collection, payload={DEAD: [*dead, self.version]}, points=ids, wait=True)

    def upsert(self, domain: str, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        self._known(domain)
        self._retire(domain, [p.point_id for p in passages])
        for i in range(0, len(passages), _BATCH):
            points = [
                models.PointStruct(
                    id=physical_id(domain, p.point_id, self.version),
                    vector=v.tolist(),
                    payload={**p.payload(), PID: p.point_id, BORN: self.version, DEAD: []},
                )
                for p, v in zip(passages[i : i + _BATCH], vectors[i : i + _BATCH], strict=True)
            ]
            self.client.upsert(self.record.collection, points=points, wait=True)

    def delete(self, domain: str, doc_ids: Sequence[str]) -> None:
        """Remove passages (by doc_id) from this version (the versions before it keep them)."""
        self._known(domain)
        pids = [point_id(d) for d in doc_ids]
        self._retire(domain, pids)
        mine: list[models.ExtendedPointId] = [physical_id(domain, pid, self.version) for pid in pids]
        self.client.delete(self.record.collection, points_selector=models.PointIdsList(points=mine), wait=True)

    def search(self, domain: str, vector: np.ndarray, limit: int) -> list[Hit]:
        self._known(domain)
        try:
            res = self.client.query_points(
                self.record.collection,
                query=np.asarray(vector, dtype=np.float32).tolist(),
                query_filter=self._filter(domain),
                limit=limit,
                with_payload=[PID],
            )
        except Exception as exc:
            raise _unavailable(exc, f"search {domain}") from exc
        return [Hit(str((p.payload or {})[PID]), float(p.score)) for p in res.points]

    def passages(self, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        self._known(domain)
        out: dict[str, Passage] = {}
        ids = list(point_ids)
        try:
            for i in range(0, len(ids), _BATCH):
                chunk = ids[i : i + _BATCH]
                records, _ = self.client.scroll(self.record.collection, scroll_filter=self._filter(domain, *_has((PID, chunk))), limit=len(chunk))
                out.update((str((r.payload or {})[PID]), Passage.from_payload(r.payload or {})) for r in records)
        except Exception as exc:
            raise _unavailable(exc, f"read passages of {domain}") from exc
        return out

    def iter_passages(self, domain: str) -> Iterator[Passage]:
        for payload, _ in self.scroll(domain, with_vectors=False):
            yield Passage.from_payload(payload)

    def scroll(self, domain: str, *, with_vectors: bool) -> Iterator[tuple[dict, list[float] | None]]:
        """Every point of one domain as this version sees it: payload and (``with_vectors``) vector."""
        self._known(domain)
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.record.collection, scroll_filter=self._filter(domain), limit=_BATCH, offset=offset, with_payload=True, with_vectors=with_vectors
            )
            for r in records:
                yield (r.payload or {}), (r.vector if with_vectors else None)  # type: ignore[misc]
            if offset is None:
                break

    def finish(self) -> None:
        """Qdrant builds its HNSW index by itself; nothing to flush client-side."""

    def close(self) -> None:
        """Give the serving lease back, once (the client is shared by the backend; it is closed there)."""
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()


class ClientBackend:
    """Index versions as version records over shared space collections on one Qdrant deployment."""

    name = "qdrant-client"

    def __init__(
        self,
        client: QdrantClient,
        prefix: str = "fedqa_",
        topology: Topology | None = None,
        *,
        lease_s: float = 120.0,
        lease_client: QdrantClient | None = None,
    ) -> None:
        """``lease_s``: how long a serving lease holds after its last renewal (FEDQA_SERVE_LEASE_S); ``lease_client``:
        the client leases are written with (default: ``client``; a key limited to the lease collection)."""
        self.client = client
        self.prefix = prefix
        self.topology = topology or Topology()
        self.records = Records(client, prefix, self.topology)
        self.lease_client = lease_client or client
        self.keeper = LeaseKeeper(LeaseBook(self.lease_client, prefix, self.topology), lease_s)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        prefer_grpc: bool = True,
        timeout_s: float = 5.0,
        prefix: str = "fedqa_",
        replication_factor: int | None = None,
        shard_number: int | None = None,
        lease_api_key: str | None = None,
        lease_s: float = 120.0,
    ) -> ClientBackend:
        """Connect to ``url`` (``:memory:`` for qdrant-client's local mode). An unset ``replication_factor`` is 2
        on a cluster of two nodes or more, else 1 (service.retrieval.client_layout.cluster_topology). Leases are
        written with ``lease_api_key`` when given (a second connection), else with ``api_key``."""
        lease_client = None
        if url == ":memory:":
            client = QdrantClient(location=":memory:")
        else:
            client = QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, timeout=int(max(1, timeout_s)))
            if lease_api_key and lease_api_key != api_key:
                lease_client = QdrantClient(url=url, api_key=lease_api_key, prefer_grpc=prefer_grpc, timeout=int(max(1, timeout_s)))
        topology = cluster_topology(client, replication_factor, shard_number)
        return cls(client, prefix, topology, lease_s=lease_s, lease_client=lease_client)

    def _record(self, version: str) -> VersionRecord | None:
        try:
            return self.records.get(version)
        except Exception as exc:
            raise _unavailable(exc, f"read index {version}") from exc

    def open(self, version: str, *, create: bool = False, serving: bool = False) -> ClientStore:
        """One version's store; ``create``: a new version (the lease collection is created with the first, so
        that a key limited to it can write leases); ``serving``: leased until the store is closed."""
        record = self._record(version)
        if create:
            create_lease_collection(self.client, self.prefix, self.topology)
        if record is None:
            if not create:
                raise StoreUnavailable(f"index {version} is not on the Qdrant deployment")
            # A version built from nothing starts a vector space (a collection created with its first domain).
            record = VersionRecord(version=version, collection=f"{self.prefix}space_{version}", lineage=[version])
            self.records.put(record)
        if not serving:
            return ClientStore(self.client, self.records, record, self.topology)
        self.keeper.hold(version)
        return ClientStore(self.client, self.records, record, self.topology, on_close=lambda: self.keeper.release(version))

    def clone(self, src: str, dst: str) -> None:
        """A new version ``dst`` seeing what ``src`` sees: one record written, no point copied."""
        source = self._record(src)
        if source is None:
            raise StoreError(f"index {src} is not on the Qdrant deployment")
        if self._record(dst) is not None:
            raise StoreError(f"index {dst} already exists")
        self.records.put(VersionRecord(dst, source.collection, [*source.lineage, dst], source.dim, list(source.domains)))

    def versions(self) -> list[str]:
        """Every version with a record (complete or not: a killed build's leftovers are listed too)."""
        return [r.version for r in self.records.all()]

    def drop(self, version: str) -> None:
        """Remove a version: its leases (lapsed ones: prune keeps a version with a live lease), its record, then every
        point of its collection that no remaining version sees (a collection no version uses any more is deleted)."""
        self.keeper.book.drop_version(version)
        record = self._record(version)
        if record is None:
            return
        self.records.delete(version)
        others = [r for r in self.records.all() if r.collection == record.collection]
        if not self.client.collection_exists(record.collection):
            return
        if not others:
            self.client.delete_collection(record.collection)
            return
        gone = unseen([r.lineage for r in others])
        self.client.delete(record.collection, points_selector=models.FilterSelector(filter=gone), wait=True)

    def leases(self) -> list[VersionLease]:
        """Every serving lease recorded on the deployment, fresh or lapsed (service.retrieval.client_leases)."""
        try:
            return self.keeper.book.all()
        except Exception as exc:
            raise _unavailable(exc, "read the serving leases") from exc

    def close(self) -> None:
        """Remove this process's leases and close the connections."""
        self.keeper.close()
        if self.lease_client is not self.client:
            self.lease_client.close()
        self.client.close()
