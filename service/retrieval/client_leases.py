"""Leases on index versions in a Qdrant deployment: which versions other processes are answering from.

A process that serves an index version from the shared store (a ``fedqa serve`` replica, a ``fedqa evaluate`` or
training run: every :func:`~service.loading.load_pipeline`) keeps one point per version it holds in the
``<prefix>leases`` collection: its holder id (host, process id, a random part), its command, and until when the
lease holds (FEDQA_SERVE_LEASE_S from the last renewal). A background thread renews the leases every third of that
time; closing the store removes its lease, and a killed process's lease lapses. ``fedqa index prune`` keeps every
version with a lease that has not lapsed (:mod:`indexes.prune`).

Writing a lease needs write access to that one collection (Qdrant's read-only key has none: serving pods are given
FEDQA_QDRANT_LEASE_API_KEY, a key limited to it). A lease that cannot be written is logged, never raised: serving
goes on, but a prune elsewhere cannot see that version in use.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from qdrant_client import QdrantClient, models

from service.retrieval.client_layout import Topology
from service.retrieval.store import VersionLease

log = logging.getLogger("fedqa.store")
LEASES = "leases"  # suffix of the lease collection
_NAMESPACE = uuid.UUID("5d0c8f3a-7e21-4b6f-a9d4-1f3e6b2c8a70")


def holder_id() -> str:
    """This process's holder id: ``host:pid:random`` (the random part tells two backends of one process apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}"


def command() -> str:
    """What this process runs, as a lease names it (``fedqa serve``; the program's name alone when run otherwise)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return f"{name} {sys.argv[1]}" if name == "fedqa" and len(sys.argv) > 1 else name


def create_lease_collection(client: QdrantClient, prefix: str, topology: Topology) -> None:
    """Create the lease collection unless it exists (a build does, with the read-write key; a key limited to the
    collection may write its points but not create it)."""
    name = f"{prefix}{LEASES}"
    if not client.collection_exists(name):
        vectors = models.VectorParams(size=1, distance=models.Distance.DOT)
        client.create_collection(name, vectors_config=vectors, replication_factor=topology.replication_factor)


class LeaseBook:
    """The ``<prefix>leases`` collection: one point per (holder, version)."""

    def __init__(self, client: QdrantClient, prefix: str, topology: Topology) -> None:
        self.client = client
        self.prefix = prefix
        self.name = f"{prefix}{LEASES}"
        self.topology = topology

    @staticmethod
    def _id(holder: str, version: str) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"{holder}\x1f{version}"))

    def put(self, lease: VersionLease) -> None:
        """Write (or renew) a lease."""
        create_lease_collection(self.client, self.prefix, self.topology)
        point = models.PointStruct(id=self._id(lease.holder, lease.version), vector=[1.0], payload=asdict(lease))
        self.client.upsert(self.name, points=[point], wait=True)

    def delete(self, holder: str, version: str) -> None:
        """Remove a lease (nothing when there is none)."""
        if self.client.collection_exists(self.name):
            self.client.delete(self.name, points_selector=models.PointIdsList(points=[self._id(holder, version)]), wait=True)

    def drop_version(self, version: str) -> None:
        """Remove every lease on ``version``, lapsed ones of killed processes too (the version is being removed)."""
        if self.client.collection_exists(self.name):
            where = models.Filter(must=[models.FieldCondition(key="version", match=models.MatchValue(value=version))])
            self.client.delete(self.name, points_selector=models.FilterSelector(filter=where), wait=True)

    def all(self) -> list[VersionLease]:
        """Every lease recorded, fresh or lapsed, by version then holder."""
        if not self.client.collection_exists(self.name):
            return []
        out: list[VersionLease] = []
        offset = None
        while True:
            points, offset = self.client.scroll(self.name, limit=256, offset=offset, with_payload=True)
            out.extend(VersionLease(**p.payload) for p in points if p.payload)
            if offset is None:
                return sorted(out, key=lambda lease: (lease.version, lease.holder))


class LeaseKeeper:
    """This process's leases in one :class:`LeaseBook`: written when a version is first held, renewed every third
    of ``ttl_s`` by a daemon thread while any is held, removed when the version's last holder releases it."""

    def __init__(self, book: LeaseBook, ttl_s: float, *, clock: Callable[[], float] = time.time) -> None:
        self.book = book
        self.ttl_s = ttl_s
        self.clock = clock
        self.holder = holder_id()
        self.command = command()
        self._held: Counter[str] = Counter()  # version -> open stores holding it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def hold(self, version: str) -> None:
        """Hold ``version`` (once more); its lease is written now when it was not held yet."""
        with self._lock:
            self._held[version] += 1
            first = self._held[version] == 1
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="fedqa-leases", daemon=True)
                self._thread.start()
        if first:
            self._write(version)

    def release(self, version: str) -> None:
        """Give one hold of ``version`` back; its lease is removed with the last."""
        with self._lock:
            if self._held[version] > 1:
                self._held[version] -= 1
                return
            if not self._held.pop(version, 0):
                return
        self._delete(version)

    def renew(self) -> None:
        """Renew every held version's lease: it holds for ``ttl_s`` from now."""
        with self._lock:
            versions = sorted(self._held)
        for version in versions:
            self._write(version)

    def close(self) -> None:
        """Stop renewing and remove every lease still held."""
        with self._lock:
            versions, thread = sorted(self._held), self._thread
            self._held.clear()
            self._thread = None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for version in versions:
            self._delete(version)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            with self._lock:
                if not self._held:  # nothing to renew: the thread ends (the next hold starts another)
                    self._thread = None
                    return
            self.renew()

    def _write(self, version: str) -> None:
        lease = VersionLease(version=version, holder=self.holder, why=self.command, expires=self.clock() + self.ttl_s)
        self._try(lambda: self.book.put(lease), f"record the lease on index {version}")

    def _delete(self, version: str) -> None:
        self._try(lambda: self.book.delete(self.holder, version), f"remove the lease on index {version}")

    def _try(self, action: Callable[[], None], what: str) -> None:
        """Run ``action``; a failure is logged (once until one succeeds again), never raised."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - a lease must never stop serving
            if not self._failing:
                log.warning(
                    "could not %s in %s (%s: %s): 'fedqa index prune' elsewhere cannot see this process use it; "
                    "give it a key that may write that collection (FEDQA_QDRANT_LEASE_API_KEY)",
                    what,
                    self.book.name,
                    type(exc).__name__,
                    exc,
                )
            self._failing = True
            return
        if self._failing:
            log.info("leases are written again in %s", self.book.name)
        self._failing = False
