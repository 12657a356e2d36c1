"""What a strategy receives for one query and what it returns (its selection of domains and weights)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer

from service.retrieval.passage import Hit
from service.routing.fitted import RouterFitted
from service.routing.gate import GateMode

Search = Callable[[Sequence[str], int], dict[str, list[Hit]]]


class StrategyDetail(BaseModel):
    """What a strategy reports beside its domains (``Routing.selector``); each strategy sets its own fields and only
    the fields set are written: lfs ``votes``, ``failures``, ``errors``, ``llm_calls``; fused ``fused`` (q per domain)
    and ``reason``; a product filter ``given``; a message asking several questions ``questions``."""

    votes: dict[str, bool | None] | None = None
    failures: int | None = None
    errors: dict[str, str] | None = None
    llm_calls: int | None = None
    fused: dict[str, float] | None = None
    reason: str | None = None
    given: list[str] | None = None
    questions: list[QuestionRouting] | None = None

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class QuestionRouting(BaseModel):
    """The routing of one question of a message that asks several."""

    query: str
    active_domains: list[str]
    probabilities: dict[str, float]
    selector: StrategyDetail | None = None


StrategyDetail.model_rebuild()


@dataclass(kw_only=True)
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
    detail: StrategyDetail | None = None
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
    fitted: RouterFitted = field(default_factory=RouterFitted)  # the router version's fitted parameters

    def p(self) -> np.ndarray:
        """Router probabilities in ``domains`` order."""
        return np.array([self.probs[d] for d in self.domains], dtype=np.float64)
