"""Retrieval quality of an index version over its whole corpus (no router, no gate).

Each question is embedded with the encoder recorded in the index's manifest, every domain's
collection is searched, and the hits are merged by similarity: Acc@1, Recall@5/10 and MRR
(first 100 ranks) over the full corpus, the honest counterpart of the training-time pool figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.artifacts import Registry
from service.config import Settings
from service.evaluation.retrieval_metrics import ranking_means
from service.queries import LabelledQuery
from service.retrieval.backends import open_backend
from service.retrieval.encoder import index_encoder_backend, load_encoder
from service.retrieval.passage import point_id
from service.retrieval.store import StoreBackend, StoreUnavailable


def evaluate_index(
    settings: Settings, queries: Sequence[LabelledQuery], *, version: str | None = None, backend: StoreBackend | None = None, depth: int = 100
) -> dict:
    """Metrics of index ``version`` (default: active) for labelled queries with gold passages."""
    registry = Registry(settings.home_dir)
    version = version or registry.active()["index"]
    if not version:
        raise StoreUnavailable(f"no index in {settings.home_dir}")
    manifest = registry.manifest("index", version)
    encoder = load_encoder(
        settings, registry, manifest.get("retriever"), backend=index_encoder_backend(manifest), calibration=manifest.get("encoder_calibration")
    )
    queries = [q for q in queries if q.gold_doc_ids]
    vectors = encoder.embed_queries([q.query for q in queries])
    store = (backend or open_backend(settings)).open(version)
    try:
        rankings = []
        for v in vectors:
            hits = [h for d in store.domains() for h in store.search(d, v, depth)]
            hits.sort(key=lambda h: -h.score)
            rankings.append([h.point_id for h in hits[:depth]])
    finally:
        store.close()
    out: dict = ranking_means(rankings, [[point_id(d) for d in q.gold_doc_ids] for q in queries])  # hits carry point ids
    out.update(index=version, retriever=manifest.get("retriever"), candidates=manifest.get("passages"), depth=depth)
    return out
