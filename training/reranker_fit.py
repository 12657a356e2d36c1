"""Fitting how the reranker's score is used: the combination ``U + weight * ce``, the depth, and the calibration.

On the validation questions (held out from training), each with the ranking it is served: the weight and the
depth with the best Acc@Top1 (ties: the smaller depth, then the smaller weight; weight 0 is the strategy's own
order), reported with a k-fold figure (each fold scored by the choice fitted on the others). A weight above 0 is
adopted only when that cross-fit wins more questions from the strategy's own order than it loses by the sign test
of :mod:`training.guard` (as the page prior and the fused strategy); else weight 0 at the smallest depth. Platt
scaling of the logit on the same candidates (the gold passage against the rest) gives the calibrated score that
sources show and "not covered" reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.reranking.params import RerankParams, reranked_order
from training.guard import assigned_folds, pays, permuted_folds
from training.reranker_data import Candidates

#: The grid the combination is chosen from (the weight of the cross-encoder's logit beside U, the depth reranked).
WEIGHTS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 1000.0)
DEPTHS = (5, 10, 20, 30)


@dataclass(frozen=True)
class CombinationFit:
    """The chosen weight and depth, and the figures of the fit."""

    weight: float
    depth: int
    acc1: float
    acc1_before: float
    acc1_crossfit: float | None
    by_depth: dict[str, float]
    questions: int
    wins: int = 0
    losses: int = 0
    pays: bool = False


def top1_correct(cands: Sequence[Candidates], ces: Sequence[np.ndarray], weight: float, depth: int) -> np.ndarray:
    """Whether each question's first passage after reranking its top ``depth`` by ``U + weight * ce`` is gold."""
    out = np.zeros(len(cands), dtype=bool)
    for i, (c, ce) in enumerate(zip(cands, ces, strict=True)):
        n = min(depth, len(c.texts))
        if n:
            out[i] = c.gold[reranked_order(c.unified[:n], ce[:n].tolist(), weight)[0]]
    return out


def _choose(cands: Sequence[Candidates], ces: Sequence[np.ndarray], depths: Sequence[int]) -> tuple[float, int, float]:
    """The (weight, depth) with the best Acc@1 over ``cands`` (ties: smaller depth, then smaller weight)."""
    best = (-1.0, 0.0, depths[0])
    for d in sorted(depths):
        for w in WEIGHTS:
            acc = float(top1_correct(cands, ces, w, d).mean()) if cands else 0.0
            if acc > best[0] + 1e-12:
                best = (acc, w, d)
    return best[1], best[2], best[0]


def fit_combination(cands: Sequence[Candidates], ces: Sequence[np.ndarray], *, max_depth: int, folds: int = 5, seed: int = 0) -> CombinationFit:
    """Fit weight and depth (depths up to ``max_depth``) on the validation questions, kept when its k-fold
    cross-fit passes the guard (too few questions for k folds: not kept)."""
    depths = [d for d in DEPTHS if d <= max_depth] or [max_depth]
    weight, depth, acc = _choose(cands, ces, depths)
    crossfit, wins, losses = None, 0, 0
    if len(cands) >= 2 * folds:
        held = np.zeros(len(cands), dtype=bool)
        for train, test in assigned_folds(permuted_folds(len(cands), folds, np.random.default_rng(seed))):
            w, d, _ = _choose([cands[i] for i in train], [ces[i] for i in train], depths)
            held[test] = top1_correct([cands[i] for i in test], [ces[i] for i in test], w, d)
        crossfit = float(held.mean())
        unchanged = top1_correct(cands, ces, 0.0, depths[0])
        wins, losses = int((held & ~unchanged).sum()), int((~held & unchanged).sum())
    paid = weight > 0 and pays(wins, losses)
    if not paid:
        weight, depth = 0.0, depths[0]
        acc = float(top1_correct(cands, ces, weight, depth).mean()) if cands else 0.0
    by_depth = {str(d): float(top1_correct(cands, ces, weight, d).mean()) for d in depths} if cands else {}
    before = float(top1_correct(cands, ces, 0.0, depth).mean()) if cands else 0.0
    return CombinationFit(weight, depth, acc, before, crossfit, by_depth, len(cands), wins, losses, paid)


def fit_calibration(cands: Sequence[Candidates], ces: Sequence[np.ndarray]) -> tuple[float, float]:
    """Platt scaling ``sigmoid(scale * ce + shift)`` of the logit: gold passages against the other candidates."""
    from sklearn.linear_model import LogisticRegression

    x = np.concatenate([ce for ce in ces]) if ces else np.zeros(0)
    y = np.concatenate([np.asarray(c.gold[: len(ce)], dtype=int) for c, ce in zip(cands, ces, strict=True)]) if ces else np.zeros(0)
    if len(set(y.tolist())) < 2:
        return 1.0, 0.0
    clf = LogisticRegression(C=1e4, max_iter=1000).fit(x.reshape(-1, 1), y)
    return float(clf.coef_[0][0]), float(clf.intercept_[0])


def fitted_params(fit: CombinationFit, calibration: tuple[float, float], max_length: int, *, titles: bool = False) -> RerankParams:
    """The parameters a reranker version stores."""
    return RerankParams(weight=fit.weight, depth=fit.depth, scale=calibration[0], shift=calibration[1], max_length=max_length, titles=titles)
