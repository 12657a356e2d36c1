"""rfs, router-based resource selection: only the router's argmax domain, U = p_j * s (within one
domain the same order as s)."""

from __future__ import annotations

import numpy as np

from service.retrieval.strategies.base import Selection, StrategyInput
from service.routing.gate import gate


def select(inp: StrategyInput) -> Selection:
    """The argmax domain."""
    domains = list(inp.domains)
    p = inp.p()
    decision = gate(p, inp.tau0, mode="deterministic")
    top = domains[int(np.argmax(p))]
    return Selection(
        strategy="rfs",
        active=[top],
        weights={top: float(inp.probs[top])},
        threshold=decision.threshold,
        activation={d: float(a) for d, a in zip(domains, decision.activation, strict=True)},
    )
