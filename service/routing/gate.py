"""The stochastic gate of MKP-QA.

tau(q) = tau0 * (1 - H(p) / log m), with H the entropy of the router's probabilities
(normalised to a distribution for the entropy), and domain j active with probability
min(1, p_j / tau(q)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

GateMode = Literal["stochastic", "deterministic"]


def normalized_entropy(p: np.ndarray) -> float:
    """H(p)/log m in [0, 1], with p rescaled to sum to one (sigmoid outputs need not)."""
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    if m <= 1:
        return 0.0
    total = p.sum()
    if total <= 0:
        return 1.0  # no evidence at all: maximal uncertainty
    q = p / total
    nz = q[q > 0]
    h = float(-(nz * np.log(nz)).sum())
    return min(1.0, max(0.0, h / math.log(m)))


def threshold(p: np.ndarray, tau0: float) -> float:
    """Adaptive threshold tau(q) = tau0 * (1 - H(p)/log m)."""
    return tau0 * (1.0 - normalized_entropy(p))


def activation_probabilities(p: np.ndarray, tau: float) -> np.ndarray:
    """min(1, p_j / tau); every domain is certain when tau is 0 (a maximally uncertain router)."""
    p = np.asarray(p, dtype=np.float64)
    if tau <= 0:
        return np.ones_like(p)
    return np.minimum(1.0, p / tau)


@dataclass(frozen=True)
class GateDecision:
    """The gate's outcome for one query."""

    threshold: float
    activation: np.ndarray
    active: np.ndarray  # boolean mask
    fallback: bool  # True when no domain came out active and the argmax was used


def gate(p: np.ndarray, tau0: float, *, mode: GateMode = "stochastic", rng: np.random.Generator | None = None) -> GateDecision:
    """Choose the active domains.

    ``stochastic``: each domain is an independent Bernoulli(min(1, p_j/tau)) draw from ``rng``
    (seed it for reproducible sampling). ``deterministic`` (evaluation): a domain is active when
    its activation probability is at least 0.5, i.e. the more likely outcome of its draw. If no
    domain is active the argmax domain is used.
    """
    p = np.asarray(p, dtype=np.float64)
    if p.size == 0:
        raise ValueError("the router gave no domains")
    tau = threshold(p, tau0)
    act = activation_probabilities(p, tau)
    if mode == "deterministic":
        active = act >= 0.5
    else:
        rng = rng if rng is not None else np.random.default_rng()
        active = rng.random(p.size) < act
    fallback = not bool(active.any())
    if fallback:
        active = np.zeros(p.size, dtype=bool)
        active[int(np.argmax(p))] = True
    return GateDecision(threshold=tau, activation=act, active=active, fallback=fallback)
