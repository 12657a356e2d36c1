"""Retrieval strategies: which domains a query searches, and how their hits are weighted in the merge.

Every strategy uses the same retriever (one query vector), the same per-domain top-k search and the
same top-k cut, as in the MKP-QA paper; they differ in the domains searched and the merge weight.
Each is one module with a ``select(StrategyInput) -> Selection`` function, one member of :class:`StrategyName`
(the names accepted by /ask, /evaluate and the CLI) and one line of :data:`REGISTRY` here.

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

from service.choices import Choice
from service.retrieval.strategies import fused, lfs, mkpqa, rfs, uis
from service.retrieval.strategies.base import Search, Selection, StrategyInput
from service.retrieval.strategies.lfs import LFS_PROMPT, LLMDomainSelector, describe_domains, parse_yes_no
from service.routing.fitted import RouterFitted
from service.routing.gate import GateMode


class StrategyName(Choice):
    """A retrieval strategy's name (each one a key of :data:`REGISTRY`)."""

    FUSED = "fused"
    MKPQA = "mkpqa"
    UIS = "uis"
    RFS = "rfs"
    LFS = "lfs"


REGISTRY: dict[StrategyName, Callable[[StrategyInput], Selection]] = {
    StrategyName.FUSED: fused.select,
    StrategyName.MKPQA: mkpqa.select,
    StrategyName.UIS: uis.select,
    StrategyName.RFS: rfs.select,
    StrategyName.LFS: lfs.select,
}
STRATEGIES: tuple[str, ...] = tuple(s.value for s in StrategyName)
DEFAULT_STRATEGY = StrategyName.FUSED

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
    strategy: StrategyName | str,
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
    fitted: RouterFitted | None = None,
) -> Selection:
    """The domains ``strategy`` searches for a query with router probabilities ``probs``."""
    name = strategy.value if isinstance(strategy, Enum) else str(strategy)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
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
        fitted=fitted if fitted is not None else RouterFitted(),
    )
    return REGISTRY[StrategyName(name)](inp)
