"""Routing evidence fused with the router: the parameters of the ``fused`` strategy and its formula.

For one query, with calibrated router probabilities p_j and every domain's top hits (searching a
domain costs about a millisecond, so all are searched), each domain gets

    q_j = sigmoid(bias + w_prior * logit(p_j) + w_best * (best_j - max_k best_k) + w_share * share_j)

where best_j is domain j's best similarity s and share_j its share of the unified top ``evidence_k``
(the top hits of all domains by raw s). Domains are chosen by the paper's gate on q (deterministic,
tau(q) = tau0 (1 - H(q)/log m)); when the router is unsure (max_j q_j < ``unsure``) every domain is
searched with weight 1 (the unified ranking). Hits rank by U = c_j * q_j^sharpness * s+ (s+ = max(s, 0)), where
c_j is a per-domain weight (1 unless fitted): the domains' similarities are not on one scale, and some
products are asked about more than others, which one ranking by raw s ignores.

When q reads no retrieval evidence (q = p: the "prior" family), the weights are known before any search, and
``search_top`` (fitted; 0: every domain) limits the search to that many domains, heaviest first
(:func:`search_order`): with hundreds of products the light ones rarely hold the top hit.

Every parameter is fitted on held-out questions by ``fedqa train router`` (training/fusion.py) and
stored with the router version; :meth:`FusionParams.paper` (q = p, sharpness 1) is the MKP-QA formula
and sharpness 0 ranks by raw s like uis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from scipy.special import expit

from service.retrieval.passage import Hit
from service.retrieval.unified import merge_weights
from service.routing.gate import GateDecision, gate

_EPS = 1e-9


@dataclass(frozen=True, kw_only=True)
class FusionParams:
    """Parameters of the fused gate and merge (see the module docstring)."""

    w_prior: float
    w_best: float
    w_share: float
    bias: float
    sharpness: float
    tau0: float
    unsure: float
    evidence_k: int
    domain_weight: dict[str, float] = field(default_factory=dict)  # c_j; a domain not in it has 1
    search_top: int = 0  # domains searched, heaviest first, when q = p (0: every domain)

    @classmethod
    def paper(cls, tau0: float, evidence_k: int = 20) -> FusionParams:
        """The MKP-QA formula: q = p, U = p * s+, the gate with ``tau0``, no fallback to every domain."""
        return cls(w_prior=1.0, w_best=0.0, w_share=0.0, bias=0.0, sharpness=1.0, tau0=tau0, unsure=0.0, evidence_k=evidence_k)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def every_domain(self) -> FusionParams:
        """The same fused q (shown in the routing) with no gate, no fallback, no per-domain weight and no breadth: every
        domain searched with weight 1, the candidate pools a ranking model orders (:mod:`service.ranking`)."""
        return replace(self, sharpness=0.0, tau0=0.0, unsure=0.0, domain_weight={}, search_top=0)

    @property
    def ranks_as_uis(self) -> bool:
        """Every domain searched with weight 1 (sharpness 0, no gate, no c_j, no breadth): what the fit's guard stores
        when no fused ranking beat uis."""
        return self.sharpness == 0 and self.tau0 == 0 and not self.domain_weight and self.search_top == 0

    @property
    def is_identity(self) -> bool:
        """q = p exactly (no retrieval evidence)."""
        return self.w_prior == 1.0 and self.w_best == 0.0 and self.w_share == 0.0 and self.bias == 0.0

    def searched(self, p: np.ndarray, domains: Sequence[str]) -> list[str] | None:
        """The domains to search for router probabilities ``p`` (in ``domains`` order), or None for every domain:
        the ``search_top`` heaviest when q = p and the router is not unsure."""
        if not self.is_identity or not 0 < self.search_top < len(domains) or float(np.max(p)) < self.unsure:
            return None
        return search_order(domain_weights(p, self.sharpness, per_domain(self, domains)), p, domains)[: self.search_top]


@dataclass(frozen=True)
class Evidence:
    """Per-domain retrieval evidence of one query, in ``domains`` order."""

    best: np.ndarray  # best s of each domain minus the best s of all (<= 0); -1 for a domain with no hit
    share: np.ndarray  # share of the unified top-k that comes from each domain


def domain_evidence(per_domain: Mapping[str, Sequence[Hit]], domains: Sequence[str], k: int) -> Evidence:
    """Best similarity per domain (relative to the overall best) and share of the unified top ``k``."""
    best = np.array([max((h.score for h in per_domain.get(d, ())), default=np.nan) for d in domains], dtype=np.float64)
    top = np.nanmax(best) if np.isfinite(best).any() else 0.0
    rel = np.where(np.isfinite(best), best - top, -1.0)
    scores = sorted(((h.score, i) for i, d in enumerate(domains) for h in per_domain.get(d, ())), reverse=True)[:k]
    share = np.zeros(len(domains), dtype=np.float64)
    for _, i in scores:
        share[i] += 1.0
    if scores:
        share /= len(scores)
    return Evidence(best=rel, share=share)


def features(p: np.ndarray, ev: Evidence) -> np.ndarray:
    """Feature matrix (m, 3): logit(p_j), relative best s, share; the fitted logistic model reads it."""
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.stack([np.log(p) - np.log1p(-p), ev.best, ev.share], axis=-1)


def fuse(p: np.ndarray, ev: Evidence, params: FusionParams) -> np.ndarray:
    """q_j: router probability and retrieval evidence combined (q = p for the identity parameters)."""
    p = np.asarray(p, dtype=np.float64)
    if params.is_identity:
        return p.copy()
    x = features(p, ev)
    z = params.bias + params.w_prior * x[..., 0] + params.w_best * x[..., 1] + params.w_share * x[..., 2]
    return expit(z)


def domain_weights(q: np.ndarray, sharpness: float, c: np.ndarray | None = None) -> np.ndarray:
    """Merge weight c_j * q_j^sharpness (sharpness 0 and no c: weight 1 for every domain, i.e. rank by s alone)."""
    q = np.clip(np.asarray(q, dtype=np.float64), 0.0, 1.0)
    w = np.ones_like(q) if sharpness == 0 else np.power(q, sharpness)
    return w if c is None else w * c


def fused_weights(q: np.ndarray, params: FusionParams, c: np.ndarray | None = None, decision: GateDecision | None = None) -> np.ndarray:
    """The fused strategy's merge weight of each domain for fused probabilities ``q`` (:func:`fuse`): c_j q_j^lambda
    (``c``: :func:`per_domain`), -inf for a domain the deterministic gate drops (``decision``: its outcome, if made
    already), every weight 1 when the router is unsure (max q < ``unsure``): what the strategy serves
    (service/retrieval/strategies/fused.py) and the fit scores (training/fusion.py)."""
    q = np.asarray(q, dtype=np.float64)
    if decision is None and params.tau0 > 0:  # tau0 = 0 keeps every domain
        decision = gate(q, params.tau0, mode="deterministic")
    return merge_weights(domain_weights(q, params.sharpness, c), q.max() < params.unsure, None if decision is None else decision.active)


def search_order(weights: np.ndarray, p: np.ndarray, domains: Sequence[str]) -> list[str]:
    """``domains`` by merge weight, heaviest first (ties, as every one with lambda 0 and no c_j: by router probability,
    then name), the order ``search_top`` cuts."""
    return [domains[i] for i in sorted(range(len(domains)), key=lambda i: (-float(weights[i]), -float(p[i]), domains[i]))]


def per_domain(params: FusionParams, domains: Sequence[str]) -> np.ndarray:
    """c_j of ``params`` in ``domains`` order (1 for a domain it does not name)."""
    return np.array([float(params.domain_weight.get(d, 1.0)) for d in domains], dtype=np.float64)
