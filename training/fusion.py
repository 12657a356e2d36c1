"""Fitting the ``fused`` strategy's parameters (service/routing/fusion.py) on held-out questions.

All on questions the router was not trained on:

1. a logistic regression of "domain j is one of the question's domains" on the features
   (logit of the calibrated p_j, relative best similarity, share of the unified top-k), one row per
   (question, domain): gives w_prior, w_best, w_share and bias;
2. a grid search of the sharpness lambda, the gate's tau0 and the "unsure" fallback level that
   maximises mean Acc@Top1 (then MRR) of the final ranking, computed exactly as the service ranks
   (the same fuse, gate and merge functions). Ties go to the most conservative setting (lowest
   sharpness, most domains searched);
3. the "prior" family beside it: q = p (the calibrated router alone), no gate, every domain searched,
   U = c_j * p_j^lambda * s+ with a small lambda (:data:`PRIOR_GRID`) and a per-domain weight c_j
   (:data:`WEIGHT_GRID`, found by coordinate ascent from c = 1): the router re-orders hits of close s, more
   so the surer it is, and c_j puts the domains' similarities on one scale and their prior odds back;
4. a guard: each family's whole fit cross-validated on the fitting questions against uis, out of fold.
   The fused grid, whose gates drop domains (a wrong setting loses many questions), is kept only when it
   beats uis by more than noise (a one-sided sign test at 95%); the prior family, which searches every
   domain with bounded weights (a wrong setting loses few), when it wins more questions than it loses out
   of fold (on ~100 fitting questions a 95% test rejected even fits that won 5 of 5 questions held out
   beyond them). The family with the best out-of-fold Acc@Top1 among those that pass is stored; when none
   passes, the ranking is uis (the fused q is still shown in the routing).

The grids are the search space, not tuned values: the chosen values are stored with the router version.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.linear_model import LogisticRegression

from service.retrieval.passage import Hit, point_id
from service.routing.fusion import FusionParams, domain_evidence, domain_weights, features, fuse, per_domain
from service.routing.gate import gate

SHARPNESS_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
TAU0_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
UNSURE_GRID = (0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
#: lambda of the prior family: the top hits' similarities differ by a few hundredths, so the exponents that
#: re-order them are small (the fused grid's smallest step, 0.25, already ranks worse than uis on faq6 dev).
PRIOR_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15)
#: c_j of the prior family (a weight of 1.1 against 0.9 lifts a hit over one with up to 22% higher s).
WEIGHT_GRID = (0.9, 0.92, 0.94, 0.96, 0.98, 1.0, 1.02, 1.04, 1.06, 1.08, 1.1)
WEIGHT_SWEEPS = 2


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


def _scores(prob: np.ndarray, c: _Prepared, params: FusionParams, top_k: int, weight: np.ndarray | None = None) -> tuple[float, float]:
    """(Acc@Top1, MRR within top_k) of the ranking :func:`service.retrieval.federated.merge` makes (``weight``: c_j)."""
    if prob.max() < params.unsure:
        w = np.ones_like(prob)
    else:
        w = domain_weights(prob, params.sharpness, weight)
        if params.tau0 > 0:  # tau0 = 0 keeps every domain
            w = np.where(gate(prob, params.tau0, mode="deterministic").active, w, -np.inf)
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
    return _scores(prob, _prepare(q, domains), params, top_k, per_domain(params, domains))


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
    base = FusionParams(w_prior=w_prior, w_best=w_best, w_share=w_share, bias=bias, sharpness=0.0, tau0=0.0, unsure=0.0, evidence_k=evidence_k)
    probs = [fuse(q.p, ev, base) for q, ev in zip(questions, evidence, strict=True)]
    best, best_score = base, (-1.0, -1.0)
    for sharp in SHARPNESS_GRID:
        for unsure in UNSURE_GRID:
            for tau0 in TAU0_GRID:
                params = FusionParams(
                    w_prior=w_prior, w_best=w_best, w_share=w_share, bias=bias, sharpness=sharp, tau0=tau0, unsure=unsure, evidence_k=evidence_k
                )
                sc = np.array([_scores(pr, c, params, top_k) for pr, c in zip(probs, prepared, strict=True)]).mean(axis=0)
                if (sc[0], sc[1]) > best_score:
                    best, best_score = params, (float(sc[0]), float(sc[1]))
    return best, best_score


def _prior_search(questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int) -> tuple[FusionParams, tuple[float, float]]:
    """The prior family's best setting on ``questions``: for each lambda, c by coordinate ascent from 1 over
    :data:`WEIGHT_GRID` on Acc@Top1 alone (ties: the weight nearest 1: MRR as a tie-break pushed the weights to
    the grid's ends); then the lambda with the best Acc@Top1 (ties: the smallest)."""
    prepared = [_prepare(q, domains) for q in questions]
    probs = [np.asarray(q.p, dtype=np.float64) for q in questions]

    def objective(lam: float, c: np.ndarray) -> tuple[float, float]:
        params = prior_params(lam, evidence_k)
        sc = np.array([_scores(p, pr, params, top_k, c) for p, pr in zip(probs, prepared, strict=True)]).mean(axis=0)
        return float(sc[0]), float(sc[1])

    best, best_score = prior_params(0.0, evidence_k), (-1.0, -1.0)
    for lam in PRIOR_GRID:
        c = np.ones(len(domains))
        score = objective(lam, c)
        for _ in range(WEIGHT_SWEEPS):
            for j in range(len(domains)):
                for v in WEIGHT_GRID:
                    trial = c.copy()
                    trial[j] = v
                    sc = objective(lam, trial) if v != c[j] else score
                    if sc[0] > score[0] or (sc[0] == score[0] and abs(v - 1.0) < abs(c[j] - 1.0)):
                        c, score = trial, sc
        if score[0] > best_score[0]:
            best, best_score = prior_params(lam, evidence_k, dict(zip(domains, c.tolist(), strict=True))), score
    return best, best_score


def prior_params(sharpness: float, evidence_k: int = 20, domain_weight: dict[str, float] | None = None) -> FusionParams:
    """The prior family's setting: q = p (identity weights), no gate, no fallback, U = c_j * p^sharpness * s+."""
    return FusionParams(
        w_prior=1.0,
        w_best=0.0,
        w_share=0.0,
        bias=0.0,
        sharpness=sharpness,
        tau0=0.0,
        unsure=0.0,
        evidence_k=evidence_k,
        domain_weight={d: round(w, 4) for d, w in (domain_weight or {}).items() if w != 1.0},
    )


Search = Callable[[Sequence[FitQuestion], Sequence[str], int, int], tuple[FusionParams, tuple[float, float]]]


@dataclass(frozen=True)
class Family:
    """A family of settings: the search over its grid, and the z of its one-sided sign test in the guard
    (wins - losses > z sqrt(wins + losses))."""

    search: Search
    z: float


#: The families the guard chooses among, simplest first (ties go to the earlier one): the bounded prior family
#: needs more wins than losses (z 0), the gate grid a 95% test.
FAMILIES: dict[str, Family] = {"prior": Family(_prior_search, 0.0), "fused": Family(_grid_search, 1.645)}


def as_uis(params: FusionParams) -> FusionParams:
    """The same fused q (shown in the routing), ranked as uis: every domain, weight 1 (sharpness 0, tau0 0, no c)."""
    return replace(params, sharpness=0.0, tau0=0.0, unsure=0.0, domain_weight={})


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
    family: str = "fused",
) -> dict:
    """Out-of-fold Acc@Top1 of one family's fitting procedure against uis: each fold is ranked with the setting
    fitted on the other folds. ``wins``/``losses``: questions whose top passage is gold under one and not the
    other; ``pays``: a one-sided sign test, wins - losses > z sqrt(wins + losses)
    with the family's z (:data:`FAMILIES`): for the fused grid at 95%, so that a gain of a few questions, which
    noise gives a search over hundreds of settings as often as routing does, does not count."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    fitted, uis = np.zeros(len(questions)), np.zeros(len(questions))
    for k in range(folds):
        held = set(order[k::folds])
        train = [q for i, q in enumerate(questions) if i not in held]
        if not train or not held:
            continue
        params, _ = FAMILIES[family].search(train, domains, top_k, evidence_k)
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
        "pays": bool(wins - losses > FAMILIES[family].z * np.sqrt(wins + losses)),
    }


def fit_fusion(
    questions: Sequence[FitQuestion],
    domains: Sequence[str],
    *,
    top_k: int = 5,
    evidence_k: int = 20,
    guard_folds: int = 5,
) -> tuple[FusionParams, dict]:
    """The fitted parameters and a report (objective of each family's best setting, of uis, and the guard's check).

    The guard: with ``guard_folds`` >= 2, each family's fit is cross-validated on the fitting questions first,
    and the family with the best out-of-fold Acc@Top1 among those whose check pays is kept; when none pays,
    the ranking falls back to uis (:func:`as_uis`): on a few hundred questions a grid search finds settings
    that win on the questions it was fitted on and lose on others, and a default that does worse than
    searching everything is the failure this strategy exists to avoid. Without the guard the family with the
    best in-sample objective is kept (ties: the prior, the simpler).
    """
    questions = [q for q in questions if q.gold and q.domains]
    if not questions:
        raise ValueError("fitting the fused strategy needs held-out questions with gold passages")
    found = {name: family.search(questions, domains, top_k, evidence_k) for name, family in FAMILIES.items()}
    chosen = max(found, key=lambda n: found[n][1])  # the first of equals: the simpler family
    report: dict = {
        "questions": len(questions),
        "families": {n: {"acc_at_top1": round(sc[0], 4), "mrr": round(sc[1], 4), "params": p.as_dict()} for n, (p, sc) in found.items()},
        "uis_acc_at_top1": round(float(_mean_scores(questions, domains, as_uis(found["fused"][0]), top_k)[0]), 4),
        "grid": {
            "sharpness": list(SHARPNESS_GRID),
            "tau0": list(TAU0_GRID),
            "unsure": list(UNSURE_GRID),
            "prior_sharpness": list(PRIOR_GRID),
            "prior_weight": list(WEIGHT_GRID),
        },
    }
    if guard_folds >= 2 and len(questions) >= guard_folds:
        checks = {n: cross_validated_gain(questions, domains, top_k=top_k, evidence_k=evidence_k, folds=guard_folds, family=n) for n in FAMILIES}
        paying = [n for n in checks if checks[n]["pays"]]
        chosen = max(paying, key=lambda n: checks[n]["acc_at_top1"]) if paying else "uis"
        report["guard"] = {**checks, "chosen": chosen}
    best = as_uis(found["fused"][0]) if chosen == "uis" else found[chosen][0]
    report["chosen"] = chosen
    report["acc_at_top1"] = report["uis_acc_at_top1"] if chosen == "uis" else round(found[chosen][1][0], 4)
    return best, report
