"""Which reranker version may serve an index: the bundle's (the active one), when it was trained on rankings of an index
embedded with the same retriever over the same domains (its fitted combination and calibration are for those)."""

from __future__ import annotations

import logging

from service.artifacts import ArtifactError, Registry
from service.reranking.model import Reranker

log = logging.getLogger("fedqa.rerank")


def load_reranker(
    registry: Registry, version: str | None, retriever: str, domains: list[str], warnings: list[str], *, threads: int | None = None
) -> Reranker | None:
    """The reranker ``version`` (the bundle's: the active one when serving) for an index of ``retriever``'s vectors
    over ``domains``, or None with a warning saying why (``threads``: its ONNX Runtime intra-op threads,
    :func:`~service.reranking.model.default_threads` when None)."""
    if not version:
        warnings.append("no trained reranker: rankings are not reranked (fedqa train reranker --data DIR)")
        return None
    try:
        manifest = registry.manifest("reranker", version)
    except ArtifactError as exc:
        warnings.append(f"reranker not used: {exc}")
        return None
    if manifest.get("retriever") != retriever or sorted(manifest.get("domains") or []) != sorted(domains):
        warnings.append(
            f"reranker {version} was trained on index {manifest.get('index')} (retriever {manifest.get('retriever')}, domains "
            f"{sorted(manifest.get('domains') or [])}), not on this index's retriever and domains: rankings are not reranked "
            "until 'fedqa train reranker' runs on this index"
        )
        return None
    try:
        return Reranker.load(registry.path("reranker", version), version, threads=threads)
    except (OSError, ValueError, KeyError) as exc:
        warnings.append(f"reranker {version} could not be loaded ({exc}): rankings are not reranked")
        log.error(warnings[-1])
        return None
