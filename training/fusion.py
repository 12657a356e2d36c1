"""Fitting the ``fused`` strategy's parameters (service/routing/fusion.py) on held-out questions.

Two steps, both on questions the router was not trained on:

1. a logistic regression of "domain j is one of the question's domains" on the features
   (logit of the calibrated p_j, relative best similarity, share of the unified top-k), one row per
   (question, domain): gives w_prior, w_best, w_share and bias;
2. a grid search of the sharpness lambda, the gate's tau0 and the "unsure" fallback level that
   maximises mean Acc@Top1 (then MRR) of the final ranking, computed exactly as the service ranks
   (the same fuse, gate and merge functions). Ties go to the most conservative setting (lowest
   sharpness, most domains searched).

The grids are the search space, not tuned values: the chosen values are stored with the router version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.linear_model import LogisticRegression

from service.retrieval.passage import Hit
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
    tie: np.ndarray  # its rank by (-s, doc_id): merge's tie-break
    gold: np.ndarray  # whether it is a gold passage


def _prepare(q: FitQuestion, domains: Sequence[str]) -> _Prepared:
    rows = [(i, h.score, h.passage.doc_id) for i, d in enumerate(domains) for h in q.hits.get(d, [])]
    order = sorted(range(len(rows)), key=lambda k: (-rows[k][1], rows[k][2]))
    tie = np.empty(len(rows), dtype=np.int64)
    tie[order] = np.arange(len(rows))
    return _Prepared(
        np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.float64), tie,
        np.array([r[2] in q.gold for r in rows], dtype=bool),
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


def fit_fusion(questions: Sequence[FitQuestion], domains: Sequence[str], *, top_k: int = 5, evidence_k: int = 20) -> tuple[FusionParams, dict]:
    """The fitted parameters and a report (objective of the chosen setting, of the paper's and of uis)."""
    questions = [q for q in questions if q.gold and q.domains]
    if not questions:
        raise ValueError("fitting the fused strategy needs held-out questions with gold passages")
    w_prior, w_best, w_share, bias = fit_evidence_weights(questions, domains, evidence_k)

    prepared = [_prepare(q, domains) for q in questions]
    evidence = [domain_evidence(q.hits, domains, evidence_k) for q in questions]
    fused_cache: dict[tuple, list[np.ndarray]] = {}

    def score(params: FusionParams) -> tuple[float, float]:
        key = (params.w_prior, params.w_best, params.w_share, params.bias)
        if key not in fused_cache:
            fused_cache[key] = [fuse(q.p, ev, params) for q, ev in zip(questions, evidence, strict=True)]
        probs = fused_cache[key]
        s = np.array([_scores(pr, c, params, top_k) for pr, c in zip(probs, prepared, strict=True)])
        return float(s[:, 0].mean()), float(s[:, 1].mean())

    best: FusionParams | None = None
    best_score = (-1.0, -1.0)
    for sharp in SHARPNESS_GRID:
        for unsure in UNSURE_GRID:
            for tau0 in TAU0_GRID:
                params = FusionParams(w_prior, w_best, w_share, bias, sharp, tau0, unsure, evidence_k)
                sc = score(params)
                if sc > best_score:
                    best, best_score = params, sc
    assert best is not None  # the grids are not empty
    uis = FusionParams(1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, evidence_k)
    report = {
        "questions": len(questions),
        "acc_at_top1": round(best_score[0], 4),
        "mrr": round(best_score[1], 4),
        "uis_acc_at_top1": round(score(uis)[0], 4),
        "grid": {"sharpness": list(SHARPNESS_GRID), "tau0": list(TAU0_GRID), "unsure": list(UNSURE_GRID)},
    }
    return best, report
