"""``fedqa ingest``: load and segment documents, embed them, and activate a new index version."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path

from indexes.build import BuildReport, build_index
from indexes.loaders import load_paths
from service.artifacts import Registry
from service.config import Settings
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, index_encoder_backend, load_encoder
from service.retrieval.store import StoreBackend


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
) -> BuildReport:
    """Make a new index version, based on the active one, that mirrors ``paths`` (``mode``: or adds them to it).

    Only new or changed passages are embedded; with :attr:`IngestMode.MIRROR` the passages the input no
    longer holds are removed. Re-ingesting the same input changes nothing (same doc_ids, same content,
    no new version). An input that yields no passages is refused (:class:`~indexes.build.EmptyBuild`).
    The new version is embedded with the retriever and encoder runtime of the active index (or
    the active retriever and FEDQA_ENCODER_BACKEND when there is no index yet).
    """
    t0 = time.perf_counter()  # the report's seconds include loading the encoder (and a first ONNX export)
    registry = Registry(settings.home_dir)
    base = registry.active()["index"]
    base_manifest = registry.manifest("index", base) if base else {}
    retriever = base_manifest.get("retriever") if base else registry.active()["retriever"]
    # New passages join the base index's vector space: same retriever, same runtime.
    encoder_backend = index_encoder_backend(base_manifest) if base else None
    encoder = encoder or load_encoder(settings, registry, retriever, backend=encoder_backend)
    backend = backend or open_backend(settings)
    passages = load_paths(
        [Path(p) for p in paths],
        domain=domain,
        count_tokens=encoder.count_tokens,
        max_tokens=settings.max_passage_tokens,
    )
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
