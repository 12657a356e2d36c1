"""``fedqa ingest``: load and segment documents, embed them, and activate a new index version."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from filelock import FileLock, Timeout

from indexes.build import BuildReport, build_index
from indexes.loaders import LoadReport, load_paths, segmentation_for
from service.artifacts import Registry
from service.config import Settings
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, EncoderBackend, encoder_path, index_encoder_backend, load_encoder, token_counter
from service.retrieval.onnx_smoothing import corpus_calibration
from service.retrieval.passage import Passage
from service.retrieval.store import StoreBackend

log = logging.getLogger("fedqa.indexes")
INGEST_LOCK = "ingest.lock"  # in the home, beside active.json.lock: held while an ingest (or index build) reads the active index and activates


class IngestMode(str, Enum):
    """What an ingest does with the active index's passages that its input does not hold."""

    MIRROR = "mirror"  # removed: the new version holds exactly the input's passages (pages that left it or shrank lose theirs)
    ADD = "add"  # kept: the input's passages are added to (or replace theirs in) the active index


def ingest(
    paths: list[Path],
    settings: Settings,
    *,
    domain: str | None = None,
    backend: StoreBackend | None = None,
    encoder: Encoder | None = None,
    progress: bool = True,
    mode: IngestMode = IngestMode.MIRROR,
    loaded: LoadReport | None = None,
) -> BuildReport:
    """Make a new index version, based on the active one, that mirrors ``paths`` (``mode``: or adds them to it).

    Only new or changed passages are embedded; with :attr:`IngestMode.MIRROR` the passages the input no
    longer holds are removed. Re-ingesting the same input changes nothing (same doc_ids, same content,
    no new version). An input that yields no passages is refused (:class:`~indexes.build.EmptyBuild`).
    The new version is embedded with the retriever and encoder runtime of the active index, and its ONNX export (the
    one calibrated on what the index recorded); with no index yet, by the active retriever and FEDQA_ENCODER_BACKEND,
    an ONNX export calibrated on a sample of the input's passages. ``loaded`` records, per product, the pages read
    and skipped (with reasons), the passages' lengths and the page furniture dropped. Ingests into one home run one
    after the other (:func:`ingest_lock`), each on the version the one before activated.
    """
    registry = Registry(settings.home_dir)
    with ingest_lock(registry):
        return _ingest(paths, settings, registry, domain=domain, backend=backend, encoder=encoder, progress=progress, mode=mode, loaded=loaded)


@contextmanager
def ingest_lock(registry: Registry) -> Iterator[None]:
    """The home's ingest lock, held from reading the active index (the new version's base) until the new version is
    active (``fedqa ingest`` holds it on until it has fitted "not covered" for it): two ingests at once would build on
    the same base, and the second to activate would drop the first's passages. One that finds it held says so and
    waits. ``fedqa index build`` holds it too (:func:`indexes.rebuild.rebuild_index`). Re-entrant within a thread (one
    lock object per home)."""
    registry.home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(registry.home / INGEST_LOCK, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("another ingest or index build into %s is running: waiting for it to activate its version", registry.home)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _ingest(
    paths: list[Path],
    settings: Settings,
    registry: Registry,
    *,
    domain: str | None,
    backend: StoreBackend | None,
    encoder: Encoder | None,
    progress: bool,
    mode: IngestMode,
    loaded: LoadReport | None,
) -> BuildReport:
    """:func:`ingest`, its lock held."""
    t0 = time.perf_counter()  # the report's seconds include loading the encoder (and a first ONNX export)
    base = registry.active()["index"]
    base_manifest = registry.manifest("index", base) if base else {}
    retriever = base_manifest.get("retriever") if base else registry.active()["retriever"]
    # New passages join the base index's vector space: same retriever, same runtime, same export.
    encoder_backend = index_encoder_backend(base_manifest) if base else None
    passages: Iterable[Passage]
    if encoder is None and not base and EncoderBackend(settings.encoder_backend) is EncoderBackend.ONNX:
        # A new vector space: the passages are segmented first, then the export is calibrated on a sample of them.
        passages = list(_load(paths, domain, token_counter(encoder_path(settings, registry, retriever)), settings, loaded))
        calibration = corpus_calibration(p.text for p in passages)
        encoder = load_encoder(settings, registry, retriever, calibration=calibration)
    else:
        calibrated = base_manifest.get("encoder_calibration")
        encoder = encoder or load_encoder(settings, registry, retriever, backend=encoder_backend, calibration=calibrated)
        passages = _load(paths, domain, encoder.count_tokens, settings, loaded)
    backend = backend or open_backend(settings)
    report = build_index(
        passages,
        registry=registry,
        backend=backend,
        encoder=encoder,
        base=base,
        progress=progress,
        meta={"sources": [str(p) for p in paths], "ingest_mode": mode.value},
        mirror=mode is IngestMode.MIRROR,
    )
    report.seconds = time.perf_counter() - t0
    return report


def _load(
    paths: list[Path], domain: str | None, count_tokens: Callable[[str], int], settings: Settings, loaded: LoadReport | None
) -> Iterator[Passage]:
    """The passages of ``paths``, segmented to FEDQA_MAX_PASSAGE_TOKENS as ``count_tokens`` counts."""
    return load_paths([Path(p) for p in paths], domain=domain, segmentation=segmentation_for(settings, count_tokens), report=loaded)
