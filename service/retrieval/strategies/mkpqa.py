"""mkpqa, the paper's formula: the gate tau(q) = tau0 (1 - H(p)/log m) picks the domains from the router's
probabilities (stochastic or deterministic), hits are ranked by U = p_j * s+ (s+ = max(s, 0), see
:func:`service.retrieval.federated.merge`)."""

from __future__ import annotations

from service.retrieval.strategies.base import Selection, StrategyInput
from service.routing.gate import gate


def select(inp: StrategyInput) -> Selection:
    """Gate on p; weight p_j."""
    domains = list(inp.domains)
    decision = gate(inp.p(), inp.tau0, mode=inp.gate_mode, rng=inp.rng)
    active = [d for d, a in zip(domains, decision.active, strict=True) if a]
    return Selection(
        strategy="mkpqa",
        active=active,
        weights={d: float(inp.probs[d]) for d in active},
        threshold=decision.threshold,
        activation={d: float(a) for d, a in zip(domains, decision.activation, strict=True)},
        fallback=decision.fallback,
        mode=inp.gate_mode,
    )
