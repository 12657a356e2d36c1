"""Embedded store: one qdrant-edge shard (the Qdrant engine in-process: HNSW, payload indexes, WAL) per domain."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import numpy as np
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    HnswIndexConfig,
    PayloadSchemaType,
    Point,
    QuantizationSearchParams,
    Query,
    QueryRequest,
    ScalarQuantizationConfig,
    ScalarType,
    ScrollRequest,
    SearchParams,
    UpdateOperation,
    VectorStorageDatatype,
)

from service.artifacts import Registry
from service.files import copytree_sparse, disk_usage, ensure_room
from service.retrieval.passage import Hit, Passage, point_id
from service.retrieval.store import StoreError, StoreUnavailable, VersionLease

_BATCH = 256
# Each shard's own search pool: one thread. A request searches its domains one after another in its
# own thread (service.retrieval.federated.search_threads); handing each shard's few segments to a pool
# of threads that sleep between requests cost more than it saved (faq6, six shards at depth 20, 2 cores,
# 10 ms between queries: 2.8 ms p50 with the default pool, 2.1 ms with one thread).
_SHARD_SEARCH_THREADS = 1
# Every search reads the shard's int8 copy of the vectors (a quarter of float32's bytes: on faq6 the six shards'
# scan is memory-bound between requests), then re-scores the best 2 x limit with the stored float16 vectors, so
# the scores are exact. faq6 dev, 221 questions: the same top-1 for all, 99.9 % of each domain's top-20, the six
# searches 1.0 instead of 1.6 ms p50 (docs/speed.md). A shard's appendable segment (passages added since the last
# optimize) is scanned exactly; `finish` quantizes it. A shard of `HnswPlan.min_passages` or more gets an HNSW graph
# (over the int8 copy, re-scored the same way): its searches stop growing with its size (docs/scale.md).
_RESCORE = QuantizationSearchParams(rescore=True, oversampling=2.0)


@dataclass(frozen=True)
class HnswPlan:
    """When a shard gets an HNSW graph, and its parameters (FEDQA_HNSW_*; m=0 in a shard's settings: none)."""

    min_passages: int = 100_000
    m: int = 16
    ef_construct: int = 100
    ef: int = 128


def _config(size: int, datatype: VectorStorageDatatype | None, *, quantized: bool, hnsw_m: int = 0, plan: HnswPlan = HnswPlan()) -> EdgeConfig:
    """A shard's settings: dot-product vectors, a one-thread search pool and, when ``quantized``, an int8 copy of
    the vectors built by ``optimize``; with ``hnsw_m`` > 0 an HNSW graph of that degree searched whatever the shard's
    size, else none (every search is a full scan, exact after re-scoring)."""
    vectors = EdgeVectorParams(size=size, distance=Distance.Dot, datatype=datatype)
    if not quantized:
        return EdgeConfig(vectors=vectors, max_search_threads=_SHARD_SEARCH_THREADS)
    if hnsw_m > 0:
        hnsw = HnswIndexConfig(m=hnsw_m, ef_construct=plan.ef_construct, full_scan_threshold=1)
    else:
        hnsw = HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=2**31 - 1)
    return EdgeConfig(
        vectors=vectors,
        max_search_threads=_SHARD_SEARCH_THREADS,
        quantization_config=ScalarQuantizationConfig(type=ScalarType.Int8, always_ram=True),
        hnsw_config=hnsw,
        optimizers=EdgeOptimizersConfig(indexing_threshold=1, default_segment_number=1),
    )


def _stored_config(path: Path) -> EdgeConfig | None:
    """The settings a shard was created with, read back from its edge_config.json (None: not ours to rewrite)."""
    try:
        stored = json.loads((path / "edge_config.json").read_text(encoding="utf-8"))
        vectors = stored["vectors"][""]
        datatype = {None: None, "float32": VectorStorageDatatype.Float32, "float16": VectorStorageDatatype.Float16}[vectors.get("datatype")]
        quantized = (stored.get("quantization_config") or {}).get("scalar", {}).get("type") == "int8"
        hnsw = stored.get("hnsw_config") or {}
        plan = HnswPlan(ef_construct=int(hnsw.get("ef_construct") or 100))
        m = int(hnsw.get("m") or 0)
        return _config(int(vectors["size"]), datatype, quantized=quantized, hnsw_m=m, plan=plan) if vectors.get("distance") == "Dot" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _load(path: Path, config: EdgeConfig | None = None) -> EdgeShard:
    """Open a shard with ``config`` or its stored settings and a one-thread search pool; a shard with other vector
    settings, or one whose settings cannot be written (a read-only home), opens as stored."""
    config = config or _stored_config(path)
    if config is None:
        return EdgeShard.load(str(path))
    try:  # the engine writes the given settings back to edge_config.json
        return EdgeShard.load(str(path), config)
    except Exception as exc:  # a read-only home, or settings the shard refuses: open it as stored
        if "WouldBlock" in str(exc):
            raise
        return EdgeShard.load(str(path))


class EdgeStore:
    """One index version as a folder of qdrant-edge shards, one per domain."""

    backend = "qdrant-edge"

    def __init__(self, root: Path, version: str, plan: HnswPlan = HnswPlan(), min_free: int = 0) -> None:
        self.root = root
        self.version = version
        self.plan = plan
        self.min_free = min_free  # bytes kept free on the home's file system (FEDQA_MIN_FREE_MB); 0: no check
        if root.is_dir() and os.access(root, os.W_OK):  # the engine may grow a writable shard's files as it opens it
            self._room(f"opening index {version}")
        self._search = SearchParams(hnsw_ef=plan.ef, quantization=_RESCORE)
        self._shards: dict[str, EdgeShard] = {}
        for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            try:
                self._shards[d.name] = _load(d)
            except Exception as exc:  # the engine reports locks and corruption as plain exceptions
                self.close()
                if "WouldBlock" in str(exc):
                    raise StoreUnavailable(
                        f"index {version} is open in another process (a running 'fedqa serve'?); stop it, or query it over HTTP"
                    ) from exc
                raise StoreUnavailable(f"cannot open shard {d}: {exc}") from exc

    def domains(self) -> list[str]:
        return sorted(self._shards)

    def _room(self, what: str, need: int = 0) -> None:
        """:class:`~service.files.DiskFull` before a write that could fill the file system: the engine writes into
        memory-mapped holes, and on a full file system such a write is a SIGBUS, not an error."""
        ensure_room(self.root, self.min_free, what, need)

    def _shard(self, domain: str) -> EdgeShard:
        try:
            return self._shards[domain]
        except KeyError:
            raise StoreError(f"unknown domain {domain!r} in index {self.version}") from None

    def count(self, domain: str) -> int:
        return int(self._shard(domain).count(CountRequest(exact=True)))

    def create_domain(self, domain: str, dim: int) -> None:
        if domain in self._shards:
            return
        self._room(f"a new shard for {domain!r} in index {self.version}")
        # float16 vectors: half the memory of float32. On faq6 (same vectors stored both ways) Acc@1,
        # Recall@5/10 and MRR over the dev questions are identical. Searches read the int8 copy (_RESCORE).
        # The write-ahead log stays: the engine's lock on a shard is the log's (created without one, a second
        # process opens the shard and "open in another process" is never reported).
        shard = EdgeShard.create(str(self.root / domain), _config(dim, VectorStorageDatatype.Float16, quantized=True))
        for field in ("doc_id", "source"):
            shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Keyword))
        self._shards[domain] = shard

    def upsert(self, domain: str, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        shard = self._shard(domain)
        for i in range(0, len(passages), _BATCH):
            self._room(f"passages of {domain!r} in index {self.version}")
            points = [
                Point(id=p.point_id, vector=v.tolist(), payload=p.payload())
                for p, v in zip(passages[i : i + _BATCH], vectors[i : i + _BATCH], strict=True)
            ]
            shard.update(UpdateOperation.upsert_points(points))

    def search(self, domain: str, vector: np.ndarray, limit: int) -> list[Hit]:
        found = self._shard(domain).query(
            QueryRequest(limit=limit, query=Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()), with_payload=False, params=self._search)
        )
        return [Hit(str(p.id), float(p.score)) for p in found]

    def passages(self, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        records = self._shard(domain).retrieve(list(point_ids), True, False)
        return {str(r.id): Passage.from_payload(r.payload or {}) for r in records}

    def iter_passages(self, domain: str) -> Iterator[Passage]:
        shard = self._shard(domain)
        offset = None
        while True:
            records, offset = shard.scroll(ScrollRequest(offset=offset, limit=_BATCH, with_payload=True))
            for r in records:
                yield Passage.from_payload(r.payload or {})
            if offset is None:
                break

    def delete(self, domain: str, doc_ids: Sequence[str]) -> None:
        delete_edge_passages(self, domain, doc_ids)

    def finish(self) -> None:
        """Give shards of ``plan.min_passages`` or more an HNSW graph, quantize and flush every shard."""
        for domain in list(self._shards):
            # optimize writes the shard's segments anew before it drops the old ones: room for a second copy
            self._room(f"optimizing {domain!r} of index {self.version}", disk_usage(self.root / domain))
            self._shards[domain] = self._with_graph(domain)
            self._shards[domain].optimize()
            self._shards[domain].flush()

    def _with_graph(self, domain: str) -> EdgeShard:
        """The shard, reopened with HNSW settings when it has grown past the plan's threshold without a graph
        (``optimize`` then builds the graph); a shard that has one keeps it."""
        shard, path = self._shards[domain], self.root / domain
        if self.plan.m <= 0 or self.count(domain) < self.plan.min_passages:
            return shard
        stored = json.loads((path / "edge_config.json").read_text(encoding="utf-8"))
        if int((stored.get("hnsw_config") or {}).get("m") or 0) > 0:
            return shard
        size = int(stored["vectors"][""]["size"])
        shard.flush()
        shard.close()
        return _load(path, _config(size, VectorStorageDatatype.Float16, quantized=True, hnsw_m=self.plan.m, plan=self.plan))

    def close(self) -> None:
        for shard in self._shards.values():
            try:
                shard.close()
            except Exception:  # closing twice or after a failed load is harmless
                pass
        self._shards.clear()


def delete_edge_passages(store: EdgeStore, domain: str, doc_ids: Sequence[str]) -> None:
    """Remove passages by doc_id from one domain's shard; a shard left empty is closed and its folder removed."""
    shard = store._shard(domain)
    ids: list[int | UUID | str] = [point_id(d) for d in doc_ids]
    for i in range(0, len(ids), _BATCH):
        store._room(f"removing passages of {domain!r} from index {store.version}")
        shard.update(UpdateOperation.delete_points(ids[i : i + _BATCH]))
    if shard.count(CountRequest(exact=True)) == 0:
        shard.close()
        del store._shards[domain]
        shutil.rmtree(store.root / domain, ignore_errors=True)


class EdgeBackend:
    """Index versions as folders under ``$FEDQA_HOME/indexes/<version>/shards``."""

    name = "qdrant-edge"

    def __init__(self, registry: Registry, plan: HnswPlan = HnswPlan(), min_free: int = 0) -> None:
        self.registry = registry
        self.plan = plan
        self.min_free = min_free  # bytes kept free on the home's file system (FEDQA_MIN_FREE_MB); 0: no check

    def _root(self, version: str) -> Path:
        return self.registry.path("index", version) / "shards"

    def open(self, version: str, *, create: bool = False, serving: bool = False) -> EdgeStore:
        """Open a version's shards (``serving`` changes nothing: the shards' own lock keeps other processes out)."""
        root = self._root(version)
        if create:
            root.mkdir(parents=True, exist_ok=True)
        elif not root.is_dir():
            raise StoreUnavailable(f"index {version} has no shards at {root}")
        return EdgeStore(root, version, self.plan, self.min_free)

    def clone(self, src: str, dst: str) -> None:
        src_root = self._root(src)
        if not src_root.is_dir():
            raise StoreError(f"index {src} has no shards to copy")
        ensure_room(self.registry.home, self.min_free, f"a copy of index {src}", disk_usage(src_root))
        # Shard files are consistent after the build's flush; a serving process only reads them. The copy keeps the
        # holes of the engine's preallocated files (a plain copy took a faq6 index from 121 MB to 0.9 GB on disk).
        copytree_sparse(src_root, self._root(dst))

    def versions(self) -> list[str]:
        """Every version with shards (complete or not: a killed build's leftovers are listed too)."""
        return sorted(p.parent.name for p in self.registry.kind_dir("index").glob("*/shards"))

    def drop(self, version: str) -> None:
        shutil.rmtree(self._root(version), ignore_errors=True)

    def leases(self) -> list[VersionLease]:
        """None: a process serving a version holds its shards open, which other processes see (:meth:`open` fails)."""
        return []
