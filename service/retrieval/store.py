"""The store interface: one index version, searched one domain (product) at a time.

Two backends implement it: :mod:`service.retrieval.edge_store` (embedded qdrant-edge, the
default) and :mod:`service.retrieval.client_store` (a Qdrant server or cluster through
qdrant-client, or its ``:memory:`` local mode). :func:`service.retrieval.backends.open_backend`
chooses one from the settings; this module imports neither.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from service.retrieval.passage import Hit, Passage


class StoreError(RuntimeError):
    """The store refused an operation (bad version, missing domain...)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or opened right now (HTTP 503)."""


@dataclass(frozen=True)
class VersionLease:
    """One process's claim, recorded in a shared store, that it serves an index version: renewed while it does,
    removed when it stops; a killed process's lease lapses at ``expires``."""

    version: str
    holder: str  # host:pid:random, one per process
    why: str
    expires: float  # epoch seconds

    def fresh(self, now: float) -> bool:
        """Whether the lease still holds at ``now`` (epoch seconds)."""
        return self.expires > now


class Store(Protocol):
    """One index version: a collection per domain."""

    backend: str
    version: str

    def domains(self) -> list[str]:
        """Domains (collections) in this version."""
        ...

    def count(self, domain: str) -> int:
        """Number of passages of one domain."""
        ...

    def create_domain(self, domain: str, dim: int) -> None:
        """Create the domain's collection if it does not exist."""
        ...

    def upsert(self, domain: str, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        """Insert or overwrite passages (point id derived from doc_id)."""
        ...

    def search(self, domain: str, vector: np.ndarray, limit: int) -> list[Hit]:
        """Top ``limit`` points of one domain by dot product with ``vector`` (ids and scores, no payload)."""
        ...

    def passages(self, domain: str, point_ids: Sequence[str]) -> dict[str, Passage]:
        """The passages stored under ``point_ids`` in one domain, by point id (ids not found are left out)."""
        ...

    def iter_passages(self, domain: str) -> Iterator[Passage]:
        """Every passage of one domain (for re-embedding and evaluation)."""
        ...

    def delete(self, domain: str, doc_ids: Sequence[str]) -> None:
        """Remove the passages ``doc_ids`` of one domain from this version (earlier versions keep them); a domain left
        with no passage is removed with them."""
        ...

    def finish(self) -> None:
        """Flush writes and build the search index (end of a build)."""
        ...

    def close(self) -> None:
        """Release files and connections."""
        ...


class StoreBackend(Protocol):
    """Creates, opens, copies and drops index versions."""

    name: str

    def open(self, version: str, *, create: bool = False, serving: bool = False) -> Store:
        """Open one index version (``create``: a new, empty one). ``serving``: the store will answer from it; a
        shared store records a lease (:class:`VersionLease`) until the store is closed, so that other processes see
        the version in use (the embedded store needs none: it opens a version in one process at a time)."""
        ...

    def clone(self, src: str, dst: str) -> None:
        """Copy every collection of version ``src`` into a new version ``dst``."""
        ...

    def versions(self) -> list[str]:
        """Every version the store holds, complete or not (a killed build's leftovers are listed: pruning)."""
        ...

    def drop(self, version: str) -> None:
        """Delete a version: what no other version sees of it."""
        ...

    def leases(self) -> list[VersionLease]:
        """Every lease the store records, fresh or lapsed (none for the embedded store)."""
        ...
