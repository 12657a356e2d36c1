"""Store on a Qdrant server or cluster through qdrant-client (``:memory:`` runs its local mode)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from qdrant_client import QdrantClient, models

from service.retrieval.passage import Hit, Passage, point_id
from service.retrieval.store import StoreError, StoreUnavailable

_BATCH = 256
_SEP = "__"


def _unavailable(exc: Exception, what: str) -> StoreUnavailable:
    return StoreUnavailable(f"Qdrant did not answer ({what}): {type(exc).__name__}")


class ClientStore:
    """One index version as collections ``<prefix><version>__<domain>``."""

    backend = "qdrant-client"

    def __init__(self, client: QdrantClient, prefix: str, version: str) -> None:
        self.client = client
        self.prefix = prefix
        self.version = version

    def _name(self, domain: str) -> str:
        return f"{self.prefix}{self.version}{_SEP}{domain}"

    def domains(self) -> list[str]:
        head = f"{self.prefix}{self.version}{_SEP}"
        try:
            names = [c.name for c in self.client.get_collections().collections]
        except Exception as exc:
            raise _unavailable(exc, "list collections") from exc
        return sorted(n[len(head) :] for n in names if n.startswith(head))

    def count(self, domain: str) -> int:
        try:
            return int(self.client.count(self._name(domain), exact=True).count)
        except Exception as exc:
            raise _unavailable(exc, f"count {domain}") from exc

    def create_domain(self, domain: str, dim: int) -> None:
        name = self._name(domain)
        if self.client.collection_exists(name):
            return
        # float16 vectors, as in the embedded store (service/retrieval/edge_store.py): half the memory per search.
        vectors = models.VectorParams(size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16)
        self.client.create_collection(name, vectors_config=vectors)
        for field in ("doc_id", "source"):
            self.client.create_payload_index(name, field_name=field, field_schema=models.PayloadSchemaType.KEYWORD)

    def upsert(self, domain: str, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        name = self._name(domain)
        for i in range(0, len(passages), _BATCH):
            points = [
                models.PointStruct(id=p.point_id, vector=v.tolist(), payload=p.payload())
                for p, v in zip(passages[i : i + _BATCH], vectors[i : i + _BATCH], strict=True)
            ]
            self.client.upsert(name, points=points, wait=True)

    def search(self, domain: str, vector: np.ndarray, limit: int) -> list[Hit]:
        try:
            res = self.client.query_points(self._name(domain), query=np.asarray(vector, dtype=np.float32).tolist(), limit=limit, with_payload=False)
        except ValueError as exc:  # local mode: unknown collection
            raise StoreError(str(exc)) from exc
        except Exception as exc:
            raise _unavailable(exc, f"search {domain}") from exc
        return [Hit(str(p.id), float(p.score)) for p in res.points]

    def passages(self, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        try:
            records = self.client.retrieve(self._name(domain), ids=list(point_ids), with_payload=True, with_vectors=False)
        except ValueError as exc:  # local mode: unknown collection
            raise StoreError(str(exc)) from exc
        except Exception as exc:
            raise _unavailable(exc, f"read passages of {domain}") from exc
        return {str(r.id): Passage.from_payload(r.payload or {}) for r in records}

    def iter_passages(self, domain: str) -> Iterator[Passage]:
        for record, _ in self._scroll(domain, with_vectors=False):
            yield record

    def _scroll(self, domain: str, *, with_vectors: bool) -> Iterator[tuple[Passage, list[float] | None]]:
        offset = None
        while True:
            records, offset = self.client.scroll(self._name(domain), limit=_BATCH, offset=offset, with_payload=True, with_vectors=with_vectors)
            for r in records:
                yield Passage.from_payload(r.payload or {}), (r.vector if with_vectors else None)  # type: ignore[misc]
            if offset is None:
                break

    def delete(self, domain: str, doc_ids: Sequence[str]) -> None:
        delete_client_passages(self, domain, doc_ids)

    def finish(self) -> None:
        """Qdrant builds its HNSW index by itself; nothing to flush client-side."""

    def close(self) -> None:
        """The client is shared by the backend; it is closed there."""


def delete_client_passages(store: ClientStore, domain: str, doc_ids: Sequence[str]) -> None:
    """Remove passages by doc_id from one domain's collection; a collection left empty is deleted."""
    name = store._name(domain)
    ids: list[models.ExtendedPointId] = [point_id(d) for d in doc_ids]
    try:
        for i in range(0, len(ids), _BATCH):
            store.client.delete(name, points_selector=models.PointIdsList(points=ids[i : i + _BATCH]), wait=True)
        if store.count(domain) == 0:
            store.client.delete_collection(name)
    except StoreUnavailable:
        raise
    except Exception as exc:
        raise _unavailable(exc, f"delete passages of {domain}") from exc


class ClientBackend:
    """Index versions as collection-name prefixes on one Qdrant deployment."""

    name = "qdrant-client"

    def __init__(self, client: QdrantClient, prefix: str = "fedqa_") -> None:
        self.client = client
        self.prefix = prefix

    @classmethod
    def from_url(
        cls, url: str, *, api_key: str | None = None, prefer_grpc: bool = True, timeout_s: float = 5.0, prefix: str = "fedqa_"
    ) -> ClientBackend:
        """Connect to ``url`` (``:memory:`` for qdrant-client's local mode)."""
        if url == ":memory:":
            return cls(QdrantClient(location=":memory:"), prefix)
        return cls(QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, timeout=int(max(1, timeout_s))), prefix)

    def open(self, version: str, *, create: bool = False) -> ClientStore:
        store = ClientStore(self.client, self.prefix, version)
        if not create and not store.domains():
            raise StoreUnavailable(f"index {version} has no collections on the Qdrant deployment")
        return store

    def clone(self, src: str, dst: str) -> None:
        source = ClientStore(self.client, self.prefix, src)
        target = ClientStore(self.client, self.prefix, dst)
        for domain in source.domains():
            info = self.client.get_collection(source._name(domain))
            dim = info.config.params.vectors.size  # type: ignore[union-attr]
            target.create_domain(domain, dim)
            batch_p: list[Passage] = []
            batch_v: list[list[float]] = []
            for passage, vec in source._scroll(domain, with_vectors=True):
                batch_p.append(passage)
                batch_v.append(vec or [])
                if len(batch_p) >= _BATCH:
                    target.upsert(domain, batch_p, np.asarray(batch_v, dtype=np.float32))
                    batch_p, batch_v = [], []
            if batch_p:
                target.upsert(domain, batch_p, np.asarray(batch_v, dtype=np.float32))

    def drop(self, version: str) -> None:
        store = ClientStore(self.client, self.prefix, version)
        for domain in store.domains():
            self.client.delete_collection(store._name(domain))
