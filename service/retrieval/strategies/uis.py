"""uis, unified index search: every domain is searched with top-k and the hits are merged by the raw
similarity s (weight 1, no routing). The top-k of a union of partitions is the top-k of the
per-partition top-k's, so with exact k-NN this is exactly the top-k of one unified index over the same
vectors, with no second copy of the corpus."""

from __future__ import annotations

from service.retrieval.strategies.base import Selection, StrategyInput
from service.routing.gate import gate


def select(inp: StrategyInput) -> Selection:
    """Every domain, weight 1."""
    domains = list(inp.domains)
    decision = gate(inp.p(), inp.tau0, mode="deterministic")
    return Selection(
        strategy="uis",
        active=domains,
        weights={d: 1.0 for d in domains},
        threshold=decision.threshold,
        activation={d: float(a) for d, a in zip(domains, decision.activation, strict=True)},
    )
