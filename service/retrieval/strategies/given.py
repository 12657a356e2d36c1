"""The caller's product filter (``domains`` on a request): exactly those products, weight 1 (ranked by s).

Not a strategy of :data:`~service.retrieval.strategies.REGISTRY`: a request that names its products bypasses the
strategy's choice, and the routing reports ``given``.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.retrieval.strategies.base import Selection, StrategyDetail


def select(domains: Sequence[str], index_domains: Sequence[str]) -> Selection:
    """``domains`` (each once, in order) of ``index_domains``; ValueError naming any the index does not have."""
    unknown = [d for d in domains if d not in index_domains]
    if unknown:
        raise ValueError(f"unknown domain(s) {unknown}; this index has {list(index_domains)}")
    chosen = list(dict.fromkeys(domains))
    return Selection(
        strategy="given",
        active=chosen,
        weights={d: 1.0 for d in chosen},
        threshold=0.0,
        activation={d: 1.0 if d in chosen else 0.0 for d in index_domains},
        detail=StrategyDetail(given=chosen),
    )
