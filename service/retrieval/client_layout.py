"""The Qdrant server layout: one collection per vector space, index versions as lineages of payload marks.

A *space* collection holds every product's passages embedded by one retriever, partitioned by the ``domain``
payload key (a tenant index, ``is_tenant: true``). Index versions share it: a point records the version that
wrote it (``born``) and the versions that replaced or removed it (``dead``); version V sees the points born in
its *lineage* (V and the versions it was built on) and not dead in it. A new version built on another therefore
writes only the passages that changed, and until it is activated (and for ever if its build fails or is killed)
no other version sees any of its writes: their lineages do not name it.

Each version's record (space collection, lineage, domains) is one point of the ``<prefix>versions`` collection,
so the number of collections is the number of vector spaces in use plus one, whatever the number of products
or of versions kept.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field

from qdrant_client import QdrantClient, models

_NAMESPACE = uuid.UUID("0b7f2d4e-51c3-4a8e-9f6d-2c1e7a9b3d50")
# Payload keys the layout adds to a passage's own (service.retrieval.passage.Passage.payload).
PID, BORN, DEAD = "pid", "born", "dead"
VERSIONS = "versions"  # suffix of the version-record collection


@dataclass
class VersionRecord:
    """One index version on the server: the space collection it lives in and the versions it sees."""

    version: str
    collection: str
    lineage: list[str]
    dim: int | None = None
    domains: list[str] = field(default_factory=list)

    @property
    def point(self) -> str:
        """The record's point id in the version-record collection."""
        return record_id(self.version)


def record_id(version: str) -> str:
    """Point id of a version's record."""
    return str(uuid.uuid5(_NAMESPACE, f"version\x1f{version}"))


def physical_id(domain: str, pid: str, born: str) -> str:
    """Point id of one passage as written by version ``born`` (the passage's own id is the ``pid`` payload)."""
    return str(uuid.uuid5(_NAMESPACE, f"{domain}\x1f{pid}\x1f{born}"))


def visible(lineage: list[str]) -> models.Filter:
    """The points a version with this lineage sees: born in it and not dead in it."""
    return models.Filter(
        must=[models.FieldCondition(key=BORN, match=models.MatchAny(any=lineage))],
        must_not=[models.FieldCondition(key=DEAD, match=models.MatchAny(any=lineage))],
    )


def in_domain(lineage: list[str], domain: str, *extra: models.Condition) -> models.Filter:
    """One domain's points as a version sees them (``extra``: more conditions, all required)."""
    return models.Filter(must=[models.FieldCondition(key="domain", match=models.MatchValue(value=domain)), visible(lineage), *extra])


def unseen(lineages: list[list[str]]) -> models.Filter:
    """The points no version with one of these lineages sees (what pruning may delete)."""
    return models.Filter(must_not=[visible(lineage) for lineage in lineages])


@dataclass(frozen=True)
class Topology:
    """How a collection is spread over a cluster (None: the server's default)."""

    replication_factor: int | None = None
    shard_number: int | None = None


def cluster_topology(client: QdrantClient, replication_factor: int | None, shard_number: int | None) -> Topology:
    """The settings' topology; an unset replication factor is 2 on a cluster of 2 nodes or more (a node restart
    then leaves every shard served), 1 on a single node or the local mode."""
    if replication_factor is None:
        replication_factor = 2 if cluster_peers(client) >= 2 else 1
    return Topology(replication_factor=replication_factor, shard_number=shard_number)


def cluster_peers(client: QdrantClient) -> int:
    """Number of nodes of the Qdrant cluster (1 when clustering is off, or in the local mode)."""
    try:
        status = client.http.distributed_api.cluster_status().result
    except Exception:  # the local mode has no HTTP API; a server without cluster answers "disabled"
        return 1
    peers = getattr(status, "peers", None)
    return len(peers) if peers else 1


class Records:
    """The version records of one deployment (the ``<prefix>versions`` collection)."""

    def __init__(self, client: QdrantClient, prefix: str, topology: Topology) -> None:
        self.client = client
        self.name = f"{prefix}{VERSIONS}"
        self.topology = topology

    def _ensure(self) -> None:
        if not self.client.collection_exists(self.name):
            self.client.create_collection(
                self.name,
                vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT),
                replication_factor=self.topology.replication_factor,
            )

    def get(self, version: str) -> VersionRecord | None:
        """The record of ``version`` (None when there is none)."""
        if not self.client.collection_exists(self.name):
            return None
        found = self.client.retrieve(self.name, ids=[record_id(version)], with_payload=True)
        payload = found[0].payload if found else None
        return VersionRecord(**payload) if payload else None

    def put(self, record: VersionRecord) -> None:
        """Write (or overwrite) a record."""
        self._ensure()
        self.client.upsert(self.name, points=[models.PointStruct(id=record.point, vector=[1.0], payload=asdict(record))], wait=True)

    def delete(self, version: str) -> None:
        """Remove a record."""
        if self.client.collection_exists(self.name):
            self.client.delete(self.name, points_selector=models.PointIdsList(points=[record_id(version)]), wait=True)

    def all(self) -> list[VersionRecord]:
        """Every record, by version name."""
        if not self.client.collection_exists(self.name):
            return []
        out: list[VersionRecord] = []
        offset = None
        while True:
            points, offset = self.client.scroll(self.name, limit=256, offset=offset, with_payload=True)
            for point in points:
                if point.payload:
                    out.append(VersionRecord(**point.payload))
            if offset is None:
                return sorted(out, key=lambda r: r.version)
