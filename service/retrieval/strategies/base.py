"""What a strategy receives for one query and what it returns (its selection of domains and weights)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.retrieval.passage import Hit
from service.routing.gate import GateMode

Search = Callable[[Sequence[str], int], dict[str, list[Hit]]]


@dataclass
class Selection:
    """The domains a strategy searches and the weight of each in the merge.

    ``hits``: per-domain hits the strategy already searched (e.g. for retrieval evidence); the
    pipeline searches only the active domains missing from it.
    """

    strategy: str
    active: list[str]
    weights: dict[str, float]
    threshold: float
    activation: dict[str, float]
    fallback: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    hits: dict[str, list[Hit]] | None = None
    mode: GateMode = "deterministic"


@dataclass
class StrategyInput:
    """Everything a strategy may use for one query."""

    probs: Mapping[str, float]
    domains: Sequence[str]
    tau0: float
    gate_mode: GateMode = "stochastic"
    rng: np.random.Generator | None = None
    query: str | None = None
    selector: Any = None  # an LLMDomainSelector (lfs), or a callable making one
    search: Search | None = None  # searches domains with the query vector: (domains, limit) -> hits
    top_k: int = 5
    fitted: Mapping[str, Any] = field(default_factory=dict)  # the router version's fitted parameters

    def p(self) -> np.ndarray:
        """Router probabilities in ``domains`` order."""
        return np.array([self.probs[d] for d in self.domains], dtype=np.float64)
