"""``fedqa index build``: re-embed the corpus with a chosen retriever into a new index version.

Every passage of the active index is read back from the store and embedded again with the
retriever (default: the active retriever version) into fresh per-domain collections of a *new*
index version, whose manifest records ``"retriever": <version>``. The new version is activated
only once complete; until then, and for ever if the build fails or is interrupted, the service
answers from the previous version (its half-built folder is removed). A build holds the home's ingest lock
(:func:`indexes.ingest.ingest_lock`) from reading its source until the new version is active, so a build and an
ingest run one after the other: neither activates a version that lacks the other's work.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from indexes.build import BuildReport, build_index
from indexes.ingest import ingest_lock
from service.artifacts import ArtifactError, Registry
from service.config import Settings
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, load_encoder
from service.retrieval.onnx_smoothing import corpus_calibration
from service.retrieval.passage import Passage
from service.retrieval.store import Store, StoreBackend, StoreUnavailable


@contextmanager
def opened_index(backend: StoreBackend, registry: Registry, version: str) -> Iterator[Store]:
    """An index version, open for reading while the block runs (then closed).

    The embedded store opens a version in one process at a time; when a running service holds it, the block reads
    a temporary copy of its shards (never activated, then removed), open under the version's own name so that what
    is fitted on it is recorded against ``version``.
    """
    try:
        store = backend.open(version)
    except StoreUnavailable:
        if backend.name != "qdrant-edge":
            raise
        with registry.building("index") as tmp:  # no manifest: never listed, never activated
            try:
                backend.clone(version, tmp)
                copy = backend.open(tmp)
                copy.version = version  # the copy stands for the version it copies
                try:
                    yield copy
                finally:
                    copy.close()
            finally:
                backend.drop(tmp)
                shutil.rmtree(registry.path("index", tmp), ignore_errors=True)
        return
    try:
        yield store
    finally:
        store.close()


@contextmanager
def index_store(settings: Settings, version: str, store: Store | None = None) -> Iterator[Store]:
    """``store`` when given (left open), else index ``version`` of the home opened for the block
    (:func:`opened_index`: from a copy while a running service holds it)."""
    if store is not None:
        with nullcontext(store) as given:
            yield given
        return
    with opened_index(open_backend(settings), Registry(settings.home_dir), version) as opened:
        yield opened


def read_index(backend: StoreBackend, registry: Registry, version: str) -> list[Passage]:
    """Every passage of an index version, domain by domain (from a copy while a running service holds it:
    :func:`opened_index`)."""
    with opened_index(backend, registry, version) as store:
        return [p for d in store.domains() for p in store.iter_passages(d)]


def rebuild_index(
    settings: Settings,
    *,
    retriever: str | None = None,
    source: str | None = None,
    backend: StoreBackend | None = None,
    encoder: Encoder | None = None,
    activate: bool = True,
    progress: bool = True,
) -> BuildReport:
    """Re-embed index ``source`` (default: the active one) with ``retriever`` into a new index version.

    ``retriever`` is a retriever version, ``"base"`` (the configured or shipped base model) or
    None (the active retriever version, else base). Waits for an ingest or build running in the home (module doc).
    """
    registry = Registry(settings.home_dir)
    with ingest_lock(registry):
        return _rebuild(settings, registry, retriever, source, backend, encoder, activate=activate, progress=progress)


def _rebuild(
    settings: Settings,
    registry: Registry,
    retriever: str | None,
    source: str | None,
    backend: StoreBackend | None,
    encoder: Encoder | None,
    *,
    activate: bool,
    progress: bool,
) -> BuildReport:
    """:func:`rebuild_index`, the ingest lock held."""
    source = source or registry.active()["index"]
    if not source:
        raise StoreUnavailable(f"no index in {settings.home_dir}: run 'fedqa ingest PATH' first")
    src_manifest = registry.manifest("index", source)
    retriever = retriever or registry.active()["retriever"] or "base"
    if retriever != "base":
        registry.manifest("retriever", retriever)  # raises unless complete
    if encoder is not None and encoder.version != retriever:
        raise ArtifactError(f"the encoder given is {encoder.version!r}, not retriever {retriever!r}")
    backend = backend or open_backend(settings)
    passages = read_index(backend, registry, source)
    if not passages:
        raise StoreUnavailable(f"index {source} has no passages to re-embed")
    if encoder is None:  # a new vector space: the base model's ONNX export is calibrated on a sample of its passages
        encoder = load_encoder(settings, registry, retriever, calibration=corpus_calibration(p.text for p in passages))
    return build_index(
        passages,
        registry=registry,
        backend=backend,
        encoder=encoder,
        base=None,
        activate=activate,
        progress=progress,
        meta={"rebuilt_from": source, "sources": src_manifest.get("sources", [])},
    )
