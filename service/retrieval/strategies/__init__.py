"""Retrieval strategies: which domains a query searches, and how their hits are weighted in the merge.

Every strategy uses the same retriever (one query vector), the same per-domain top-k search and the
same top-k cut, as in the MKP-QA paper; they differ in the domains searched and the merge weight.
Each is one module with a ``select(StrategyInput) -> Selection`` function, registered once in
:data:`REGISTRY`; :class:`StrategyName` (the names accepted by /ask, /evaluate and the CLI) is made
from the registry, so adding a strategy is one module and one line here.

``fused``  (default) router + retrieval evidence, fitted gate, sharpness and per-domain weights (strategies/fused.py)
``mkpqa``  the paper: gate on p, U = p_j * s (strategies/mkpqa.py)
``uis``    every domain, raw s: the unified index (strategies/uis.py)
``rfs``    the router's argmax domain (strategies/rfs.py)
``lfs``    an LLM says yes/no per domain (strategies/lfs.py)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np

from service.retrieval.strategies import fused, lfs, mkpqa, rfs, uis
from service.retrieval.strategies.base import Search, Selection, StrategyInput
from service.retrieval.strategies.lfs import LFS_PROMPT, LLMDomainSelector, describe_domains, parse_yes_no
from service.routing.gate import GateMode

REGISTRY: dict[str, Callable[[StrategyInput], Selection]] = {
    "fused": fused.select,
    "mkpqa": mkpqa.select,
    "uis": uis.select,
    "rfs": rfs.select,
    "lfs": lfs.select,
}

StrategyName = Enum("StrategyName", {name.upper(): name for name in REGISTRY}, type=str)  # type: ignore[misc]
StrategyName.__doc__ = "A retrieval strategy's name (the keys of REGISTRY)."
StrategyName.__str__ = lambda self: self.value  # type: ignore[method-assign,attr-defined]
STRATEGIES: tuple[str, ...] = tuple(REGISTRY)
DEFAULT_STRATEGY = StrategyName("fused")

__all__ = [
    "DEFAULT_STRATEGY",
    "LFS_PROMPT",
    "LLMDomainSelector",
    "REGISTRY",
    "STRATEGIES",
    "Search",
    "Selection",
    "StrategyInput",
    "StrategyName",
    "describe_domains",
    "parse_yes_no",
    "select",
]


def select(
    strategy: str,
    probs: Mapping[str, float],
    domains: Sequence[str],
    *,
    tau0: float,
    gate_mode: GateMode = "stochastic",
    rng: np.random.Generator | None = None,
    query: str | None = None,
    selector: Any = None,
    search: Search | None = None,
    top_k: int = 5,
    fitted: Mapping[str, Any] | None = None,
) -> Selection:
    """The domains ``strategy`` searches for a query with router probabilities ``probs``."""
    name = strategy.value if isinstance(strategy, Enum) else str(strategy)
    if name not in REGISTRY:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(REGISTRY)}")
    inp = StrategyInput(
        probs=probs,
        domains=list(domains),
        tau0=tau0,
        gate_mode=gate_mode,
        rng=rng,
        query=query,
        selector=selector,
        search=search,
        top_k=top_k,
        fitted=fitted or {},
    )
    return REGISTRY[name](inp)
