"""Build index versions: embed passages into one collection per domain, then switch atomically.

Every build writes a *new* index version (a copy of the active one plus the changes, less the
passages a mirroring ingest no longer finds), marks it complete and only then makes it active, so a running service keeps answering from the old
version, and a crashed or interrupted build leaves the old version active.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from service.artifacts import Registry
from service.retrieval.encoder import Encoder
from service.retrieval.lexical import LexicalIndex
from service.retrieval.passage import Passage
from service.retrieval.store import Store, StoreBackend
from service.retrieval.vocabulary import Vocabulary

log = logging.getLogger("fedqa.indexes")
EMBED_BATCH = 512  # passages handed to the encoder at once (it batches them by 32 inside)


@dataclass
class BuildReport:
    """What a build did."""

    version: str | None
    previous: str | None
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    domains: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    duplicates: int = 0

    @property
    def changed(self) -> bool:
        """Whether a new version was made."""
        return self.version is not None and self.version != self.previous


class EmptyBuild(ValueError):
    """A build was given no passages: nothing is written or activated."""


def dedupe(passages: Iterable[Passage]) -> tuple[list[Passage], int]:
    """Keep the last passage of each (domain, doc_id); returns the passages and how many were dropped.

    A doc_id is unique within its domain: the same doc_id in two domains is two passages.
    """
    seen: dict[tuple[str, str], Passage] = {}
    total = 0
    for p in passages:
        seen[(p.domain, p.doc_id)] = p
        total += 1
    return list(seen.values()), total - len(seen)


def build_index(
    passages: Iterable[Passage],
    *,
    registry: Registry,
    backend: StoreBackend,
    encoder: Encoder,
    base: str | None,
    activate: bool = True,
    progress: bool = True,
    meta: dict | None = None,
    mirror: bool = False,
) -> BuildReport:
    """Write a new index version = ``base`` (or nothing) + ``passages`` embedded by ``encoder``.

    Passages whose doc_id already exists in ``base`` with the same content are not re-embedded;
    if nothing changed no version is made. ``base`` must have been embedded by ``encoder``.
    ``mirror``: the new version holds ``passages`` only (the base's other passages are removed).
    No passages at all is refused (:class:`EmptyBuild`) before anything is written.
    """
    t_start = time.perf_counter()
    items, dropped = dedupe(passages)
    if not items:
        raise EmptyBuild("the input yields no passages: nothing was written and the active index is unchanged")
    report = BuildReport(version=None, previous=base, duplicates=dropped)
    with registry.building("index") as version:
        try:
            held = _write(version, items, backend=backend, encoder=encoder, base=base, mirror=mirror, progress=progress, report=report)
            changed = held is not None
            if held is not None:
                Vocabulary.of(held).save(registry.path("index", version))
                LexicalIndex.build(held).save(registry.path("index", version))
                registry.complete("index", version, _manifest(encoder, backend, base, report, meta))
        except BaseException:
            _discard(registry, backend, version)  # leave nothing half-built behind; the active version is untouched
            raise
        if not changed:
            _discard(registry, backend, version)
            report.version = base
            report.seconds = time.perf_counter() - t_start
            return report
    if activate:
        registry.activate("index", version)
    report.version = version
    report.seconds = time.perf_counter() - t_start
    return report


def _discard(registry: Registry, backend: StoreBackend, version: str) -> None:
    """Remove an unfinished version's collections and folder."""
    try:
        backend.drop(version)
    finally:
        shutil.rmtree(registry.path("index", version), ignore_errors=True)


def _write(
    version: str,
    items: list[Passage],
    *,
    backend: StoreBackend,
    encoder: Encoder,
    base: str | None,
    mirror: bool,
    progress: bool,
    report: BuildReport,
) -> list[Passage] | None:
    """Fill ``version`` (a copy of ``base``) with the changes ``items`` make; the passages it then holds, or None when
    there are no changes."""
    if base:
        backend.clone(base, version)
    store = backend.open(version, create=True)
    try:
        existing = {d: {p.doc_id: p for p in store.iter_passages(d)} for d in store.domains()}
        todo = _changes(items, existing, report)
        stale = _stale(items, existing) if mirror else {}
        report.removed = sum(len(v) for v in stale.values())
        if not todo and not stale and base:
            report.domains = {d: len(v) for d, v in existing.items()}
            return None
        for domain, doc_ids in sorted(stale.items()):
            store.delete(domain, doc_ids)
        _embed(store, todo, encoder, progress=progress)
        store.finish()
        report.domains = {d: store.count(d) for d in store.domains()}
        return list(_held(existing, todo, stale))
    finally:
        store.close()


def _held(existing: dict[str, dict[str, Passage]], todo: dict[str, list[Passage]], stale: dict[str, list[str]]) -> Iterator[Passage]:
    """The passages the new version holds: the base's, less the stale ones, with the new and changed ones."""
    for domain in set(existing) | set(todo):
        held = dict(existing.get(domain, {}))
        for doc_id in stale.get(domain, []):
            held.pop(doc_id, None)
        held.update((p.doc_id, p) for p in todo.get(domain, []))
        yield from held.values()


def _changes(items: list[Passage], existing: dict[str, dict[str, Passage]], report: BuildReport) -> dict[str, list[Passage]]:
    """The passages to embed per domain: new or changed ones (counted in ``report``); unchanged ones are kept as they are."""
    todo: dict[str, list[Passage]] = defaultdict(list)
    for p in items:
        old = existing.get(p.domain, {}).get(p.doc_id)
        if old == p:
            report.unchanged += 1
            continue
        if old is None:
            report.added += 1
        else:
            report.updated += 1
        todo[p.domain].append(p)
    return todo


def _stale(items: list[Passage], existing: dict[str, dict[str, Passage]]) -> dict[str, list[str]]:
    """Per domain, the doc_ids of the base that ``items`` no longer hold (pages that left the input or shrank)."""
    kept = {(p.domain, p.doc_id) for p in items}
    stale = {d: sorted(i for i in old if (d, i) not in kept) for d, old in existing.items()}
    return {d: ids for d, ids in stale.items() if ids}


def _embed(store: Store, todo: dict[str, list[Passage]], encoder: Encoder, *, progress: bool) -> None:
    """Embed and store the passages of each domain, in batches of EMBED_BATCH."""
    total = sum(len(v) for v in todo.values())
    with tqdm(total=total, desc="embedding passages", unit="passage", disable=not progress) as bar:
        for domain in sorted(todo):
            # Length-sorted batches waste little compute on padding.
            batch = sorted(todo[domain], key=lambda p: len(p.text))
            store.create_domain(domain, encoder.dim)
            for i in range(0, len(batch), EMBED_BATCH):
                part = batch[i : i + EMBED_BATCH]
                store.upsert(domain, part, encoder.embed_passages([p.text for p in part], bulk=True))
                bar.update(len(part))


def _manifest(encoder: Encoder, backend: StoreBackend, base: str | None, report: BuildReport, meta: dict | None) -> dict:
    """The index version's manifest: what embedded it, where it is stored, what it holds."""
    return {
        "retriever": encoder.version,
        "encoder_path": str(encoder.path),
        # Encoders that do not say (test doubles, older callers) run PyTorch.
        "encoder_backend": getattr(getattr(encoder, "backend", None), "value", "torch"),
        "passage_runtime": getattr(encoder, "passage_runtime", "torch"),
        # What the ONNX export's int8 smoothing was calibrated on (None on PyTorch): queries use that export.
        "encoder_calibration": getattr(encoder, "calibration", None),
        "dim": encoder.dim,
        "backend": backend.name,
        "base": base,
        "domains": report.domains,
        "passages": sum(report.domains.values()),
        **(meta or {}),
    }
