"""The store backend the settings choose (the factory sits above the Protocol and its backends).

Adding a backend: a module implementing :class:`~service.retrieval.store.StoreBackend` and one
branch here.
"""

from __future__ import annotations

from service.config import Settings
from service.retrieval.store import StoreBackend


def open_backend(settings: Settings) -> StoreBackend:
    """The backend the settings choose: qdrant-client when FEDQA_QDRANT_URL is set, else qdrant-edge."""
    if settings.qdrant_url:
        from service.retrieval.client_store import ClientBackend

        return ClientBackend.from_url(
            settings.qdrant_url,
            api_key=settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None,
            prefer_grpc=settings.qdrant_prefer_grpc,
            timeout_s=settings.qdrant_timeout_s,
            prefix=settings.collection_prefix,
            replication_factor=settings.qdrant_replication_factor,
            shard_number=settings.qdrant_shard_number,
            lease_api_key=settings.qdrant_lease_api_key.get_secret_value() if settings.qdrant_lease_api_key else None,
            lease_s=settings.serve_lease_s,
        )
    from service.artifacts import Registry
    from service.retrieval.edge_store import EdgeBackend, HnswPlan

    plan = HnswPlan(min_passages=settings.hnsw_min_passages, m=settings.hnsw_m, ef=settings.hnsw_ef)
    return EdgeBackend(Registry(settings.home_dir), plan, settings.min_free_mb * 2**20)
