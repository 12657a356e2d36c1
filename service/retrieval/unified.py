"""The unified score U of a candidate passage and the order candidates rank in: the one implementation that the merge
serves with (:func:`service.retrieval.federated.merge`) and the fits search with (training/fusion.py and its
vectorised scoring, training/fusion_breadth.py, training/page_prior.py).

A candidate of domain j with similarity s scores

    U = w_j * s+ + b,    s+ = max(s, 0)

with w_j its domain's merge weight (p_j for mkpqa, 1 for uis, c_j q_j^lambda for the fused strategy; 1 for every
domain when the router is unsure, -inf for a domain the gate dropped, whose candidates do not rank: :func:`merge_weights`)
and b the page prior's change to it (:func:`page_bonus` on a page that answered labelled questions, less
:func:`demotion` for a known answer far from the question it answered). Candidates rank by U, highest first; equal U by
s, then point id, then domain (:func:`tie_ranks`), so every ranking is deterministic. The functions take arrays of
candidates: the merge passes one question's, the fits a whole grid's at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

_LAST = np.iinfo(np.int64).max  # a tie rank after every candidate's


def positive(s: ArrayLike) -> np.ndarray:
    """s+ = max(s, 0) per candidate (a NaN similarity counts as 0, as it does in :func:`positive_similarity`).

    Vectors are unit length and compared by dot product, so s is a cosine in [-1, 1]. A weight on a negative s would
    reverse the router's preference (a higher p giving a lower U), so s is clipped at 0: a passage at or below
    orthogonal to the query is unrelated to it whatever its domain. The paper's U = p * s is unchanged wherever s >= 0,
    and U never decreases when p grows.
    """
    s = np.asarray(s, dtype=np.float64)
    return np.where(s > 0.0, s, 0.0)


def positive_similarity(s: float) -> float:
    """:func:`positive` of one similarity, as a float (for code that scores one candidate at a time)."""
    return s if s > 0.0 else 0.0


def unified_scores(w: ArrayLike, s: ArrayLike, bonus: ArrayLike | None = None) -> np.ndarray:
    """U = w * s+ (+ ``bonus``) per candidate (the arrays broadcast). A weight of -inf (a dropped domain) gives -inf,
    or NaN where s+ is 0: not finite, so not ranked (:func:`ranking`)."""
    with np.errstate(invalid="ignore"):
        u = np.asarray(w, dtype=np.float64) * positive(s)
    return u if bonus is None else u + np.asarray(bonus, dtype=np.float64)


def merge_weights(power: np.ndarray, unsure: ArrayLike = False, active: np.ndarray | None = None) -> np.ndarray:
    """w_j from ``power`` (c_j q_j^lambda, :func:`service.routing.fusion.domain_weights`): -inf where the gate dropped
    the domain (``active`` False; None: it dropped none), and 1 for every domain where the router is unsure
    (``unsure``: one flag, or one per row of a (questions, domains) matrix, shaped to broadcast)."""
    w = power if active is None else np.where(active, power, -np.inf)
    return np.where(unsure, 1.0, w)


def tie_ranks(s: ArrayLike, point_ids: Sequence[str], domains: Sequence[str]) -> np.ndarray:
    """Each candidate's place by (-s, point id, domain): the order of candidates of equal U."""
    n = len(point_ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.asarray(domains, dtype=str), np.asarray(point_ids, dtype=str), -np.asarray(s, dtype=np.float64)))
    tie = np.empty(n, dtype=np.int64)
    tie[order] = np.arange(n)
    return tie


def ranking(u: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Indices of the candidates whose U is finite, in rank order: by U, highest first, then by ``tie``."""
    keep = np.flatnonzero(np.isfinite(u))
    return keep[np.lexsort((tie[keep], -u[keep]))]


def rank_order(values: Sequence[float], s: Sequence[float], point_ids: Sequence[str], domains: Sequence[str]) -> list[int]:
    """:func:`ranking` by ``values`` with :func:`tie_ranks`' ties, in one sort: for one question's few candidates, as
    Python floats (the merge's form; equal to ``ranking(values, tie_ranks(s, point_ids, domains))``)."""
    keep = [i for i, v in enumerate(values) if math.isfinite(v)]
    return sorted(keep, key=lambda i: (-values[i], -s[i], point_ids[i], domains[i]))


def ahead(u: np.ndarray, tie: np.ndarray, u_other: ArrayLike, tie_other: ArrayLike) -> np.ndarray:
    """Whether candidates (``u``, ``tie``) rank before (``u_other``, ``tie_other``), elementwise: :func:`ranking`'s order."""
    return (u > u_other) | ((u == u_other) & (tie < tie_other))


def first(u: np.ndarray, tie: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of (rows, candidates) arrays: the column of the first ranked candidate among ``keep`` (0 where none),
    and whether there is one."""
    u = np.where(keep, u, -np.inf)
    found = np.asarray(keep.any(axis=1))
    return np.where(keep & (u == u.max(axis=1, keepdims=True)), tie, _LAST).argmin(axis=1), found


def page_bonus(weight: ArrayLike, counts: ArrayLike) -> np.ndarray:
    """The page prior's lift: weight * log(1 + n) per candidate, ``counts`` its log(1 + n) (n the labelled questions
    answered on its page)."""
    return np.asarray(weight, dtype=np.float64) * np.asarray(counts, dtype=np.float64)


def demotion(penalty: ArrayLike, match: ArrayLike, cosine: ArrayLike) -> np.ndarray:
    """What a known answer loses when the nearest counted question it answers is at ``cosine`` from the question:
    penalty * max(0, match - cosine)."""
    return np.asarray(penalty, dtype=np.float64) * np.maximum(0.0, np.asarray(match, dtype=np.float64) - np.asarray(cosine, dtype=np.float64))
