"""Fitting the ``fused`` strategy's parameters (service/routing/fusion.py) on held-out questions.

Two steps, both on questions the router was not trained on:

1. a logistic regression of "domain j is one of the question's domains" on the features
   (logit of the calibrated p_j, relative best similarity, share of the unified top-k), one row per
   (question, domain): gives w_prior, w_best, w_share and bias;
2. a grid search of the sharpness lambda, the gate's tau0 and the "unsure" fallback level that
   maximises mean Acc@Top1 (then MRR) of the final ranking, computed exactly as the service ranks
   (the same fuse, gate and merge functions). Ties go to the most conservative setting (lowest
   sharpness, most domains searched);
3. a guard: the same two steps cross-validated on the fitting questions; unless they beat uis out of
   fold by more than noise (a sign test), the ranking is uis (the fused q is still shown in the routing).

The grids are the search space, not tuned values: the chosen values are stored with the router version.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.linear_model import LogisticRegression

from service.retrieval.passage import Hit, point_id
from service.routing.fusion import FusionParams, domain_evidence, domain_weights, features, fuse
from service.routing.gate import gate

SHARPNESS_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
TAU0_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
UNSURE_GRID = (0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)


@dataclass
class FitQuestion:
    """One held-out question: calibrated router probabilities, every domain's top hits, its gold labels."""

    p: np.ndarray  # (m,) in ``domains`` order
    hits: dict[str, list[Hit]]
    domains: list[str]  # its gold domains
    gold: set[str] = field(default_factory=set)  # gold doc_ids


@dataclass
class _Prepared:
    """A question's candidates as arrays (the evidence does not depend on the grid's parameters)."""

    dom: np.ndarray  # domain index of each candidate hit
    s: np.ndarray  # its similarity
    tie: np.ndarray  # its rank by (-s, point id): merge's tie-break
    gold: np.ndarray  # whether it is a gold passage


def _prepare(q: FitQuestion, domains: Sequence[str]) -> _Prepared:
    rows = [(i, h.score, h.point_id) for i, d in enumerate(domains) for h in q.hits.get(d, [])]
    order = sorted(range(len(rows)), key=lambda k: (-rows[k][1], rows[k][2]))
    gold = {point_id(d) for d in q.gold}
    tie = np.empty(len(rows), dtype=np.int64)
    tie[order] = np.arange(len(rows))
    return _Prepared(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.float64),
        tie,
        np.array([r[2] in gold for r in rows], dtype=bool),
    )


def _scores(prob: np.ndarray, c: _Prepared, params: FusionParams, top_k: int) -> tuple[float, float]:
    """(Acc@Top1, MRR within top_k) of the ranking :func:`service.retrieval.federated.merge` makes."""
    if prob.max() < params.unsure:
        w = np.ones_like(prob)
    else:
        w = np.where(gate(prob, params.tau0, mode="deterministic").active, domain_weights(prob, params.sharpness), -np.inf)
    on = np.isfinite(w)
    u = np.where(on[c.dom], np.where(on, w, 0.0)[c.dom] * np.maximum(c.s, 0.0), -np.inf)
    keep = np.isfinite(u)
    order = np.lexsort((c.tie[keep], -u[keep]))[:top_k]
    gold = c.gold[keep][order]
    acc = 1.0 if gold.size and gold[0] else 0.0
    hit = np.flatnonzero(gold)
    return acc, (1.0 / (hit[0] + 1) if hit.size else 0.0)


def ranking_scores(q: FitQuestion, domains: Sequence[str], params: FusionParams, top_k: int) -> tuple[float, float]:
    """(Acc@Top1, MRR within top_k) of the fused ranking of one question under ``params``."""
    prob = fuse(q.p, domain_evidence(q.hits, domains, params.evidence_k), params)
    return _scores(prob, _prepare(q, domains), params, top_k)


def fit_evidence_weights(questions: Sequence[FitQuestion], domains: Sequence[str], evidence_k: int) -> tuple[float, float, float, float]:
    """(w_prior, w_best, w_share, bias) of the logistic model of domain relevance."""
    xs, ys = [], []
    for q in questions:
        xs.append(features(q.p, domain_evidence(q.hits, domains, evidence_k)))
        ys.append([1.0 if d in q.domains else 0.0 for d in domains])
    x, y = np.concatenate(xs), np.concatenate(ys)
    if len(set(y.tolist())) < 2:
        return 1.0, 0.0, 0.0, 0.0
    model = LogisticRegression(max_iter=1000).fit(x, y)
    w = model.coef_[0]
    return float(w[0]), float(w[1]), float(w[2]), float(model.intercept_[0])


def _grid_search(questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int) -> tuple[FusionParams, tuple[float, float]]:
    """The grid's setting with the best (mean Acc@Top1, MRR) on ``questions`` (ties: the first, most conservative)."""
    w_prior, w_best, w_share, bias = fit_evidence_weights(questions, domains, evidence_k)
    prepared = [_prepare(q, domains) for q in questions]
    evidence = [domain_evidence(q.hits, domains, evidence_k) for q in questions]
    base = FusionParams(w_prior, w_best, w_share, bias, 0.0, 0.0, 0.0, evidence_k)
    probs = [fuse(q.p, ev, base) for q, ev in zip(questions, evidence, strict=True)]
    best, best_score = base, (-1.0, -1.0)
    for sharp in SHARPNESS_GRID:
        for unsure in UNSURE_GRID:
            for tau0 in TAU0_GRID:
                params = FusionParams(w_prior, w_best, w_share, bias, sharp, tau0, unsure, evidence_k)
                sc = np.array([_scores(pr, c, params, top_k) for pr, c in zip(probs, prepared, strict=True)]).mean(axis=0)
                if (sc[0], sc[1]) > best_score:
                    best, best_score = params, (float(sc[0]), float(sc[1]))
    return best, best_score


def as_uis(params: FusionParams) -> FusionParams:
    """The same fused q (shown in the routing), ranked as uis: every domain, weight 1 (sharpness 0, tau0 0)."""
    return replace(params, sharpness=0.0, tau0=0.0, unsure=0.0)


def _mean_scores(questions: Sequence[FitQuestion], domains: Sequence[str], params: FusionParams, top_k: int) -> np.ndarray:
    return np.array([ranking_scores(q, domains, params, top_k) for q in questions]).mean(axis=0)


def cross_validated_gain(
    questions: Sequence[FitQuestion],
    domains: Sequence[str],
    *,
    top_k: int,
    evidence_k: int,
    folds: int,
    seed: int = 0,
) -> dict:
    """Out-of-fold Acc@Top1 of the fitting procedure against uis: each fold is ranked with the setting fitted
    on the other folds. ``wins``/``losses``: questions whose top passage is gold under one and not the other;
    ``pays``: a one-sided sign test at 95% (wins - losses > 1.645 sqrt(wins + losses)), so a gain of a few
    questions, which noise gives as often as routing does, does not count."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    fitted, uis = np.zeros(len(questions)), np.zeros(len(questions))
    for k in range(folds):
        held = set(order[k::folds])
        train = [q for i, q in enumerate(questions) if i not in held]
        if not train or not held:
            continue
        params, _ = _grid_search(train, domains, top_k, evidence_k)
        for i in held:
            fitted[i] = ranking_scores(questions[i], domains, params, top_k)[0]
            uis[i] = ranking_scores(questions[i], domains, as_uis(params), top_k)[0]
    wins, losses = int(((fitted > 0) & (uis == 0)).sum()), int(((fitted == 0) & (uis > 0)).sum())
    return {
        "folds": folds,
        "acc_at_top1": round(float(fitted.mean()), 4),
        "uis_acc_at_top1": round(float(uis.mean()), 4),
        "wins": wins,
        "losses": losses,
        "pays": bool(wins - losses > 1.645 * np.sqrt(wins + losses)),
    }


def fit_fusion(
    questions: Sequence[FitQuestion],
    domains: Sequence[str],
    *,
    top_k: int = 5,
    evidence_k: int = 20,
    guard_folds: int = 5,
) -> tuple[FusionParams, dict]:
    """The fitted parameters and a report (objective of the chosen setting, of uis, and the guard's check).

    The guard: with ``guard_folds`` >= 2, the whole fit is cross-validated on the fitting questions first;
    unless the fitted settings beat uis out of fold (Acc@Top1, by a sign test), the ranking falls back to uis
    (:func:`as_uis`): on a few hundred questions a grid search finds settings that win on the questions it
    was fitted on and lose on others, and a default that does worse than searching everything is the
    failure this strategy exists to avoid.
    """
    questions = [q for q in questions if q.gold and q.domains]
    if not questions:
        raise ValueError("fitting the fused strategy needs held-out questions with gold passages")
    best, best_score = _grid_search(questions, domains, top_k, evidence_k)
    report: dict = {
        "questions": len(questions),
        "acc_at_top1": round(best_score[0], 4),
        "mrr": round(best_score[1], 4),
        "uis_acc_at_top1": round(float(_mean_scores(questions, domains, as_uis(best), top_k)[0]), 4),
        "grid": {"sharpness": list(SHARPNESS_GRID), "tau0": list(TAU0_GRID), "unsure": list(UNSURE_GRID)},
    }
    if guard_folds >= 2 and len(questions) >= guard_folds:
        cv = cross_validated_gain(questions, domains, top_k=top_k, evidence_k=evidence_k, folds=guard_folds)
        report["guard"] = {**cv, "chosen": "fitted" if cv["pays"] else "uis"}
        if not cv["pays"]:
            best = as_uis(best)
    return best, report
