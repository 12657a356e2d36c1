"""The fused fit as it was before it was vectorised (training/fusion.py at 803d66b), question by question: the
reference that tests/unit/service/routing/test_fusion.py holds the vectorised fit to (same parameters, same scores, same tie-breaks)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from service.routing.fusion import FusionParams, domain_evidence, domain_weights, fuse, per_domain
from service.routing.gate import gate
from training.fusion import (
    FAMILIES,
    PRIOR_GRID,
    SHARPNESS_GRID,
    TAU0_GRID,
    UNSURE_GRID,
    WEIGHT_GRID,
    WEIGHT_SWEEPS,
    FitQuestion,
    _prepare,
    as_uis,
    fit_evidence_weights,
    prior_params,
)
from training.fusion_scoring import Prepared


def scores(prob: np.ndarray, c: Prepared, params: FusionParams, top_k: int, weight: np.ndarray | None = None) -> tuple[float, float]:
    """(Acc@Top1, MRR within top_k) of one question's ranking: a lexsort by (-U, tie rank)."""
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
    prob = fuse(q.p, domain_evidence(q.hits, domains, params.evidence_k), params)
    return scores(prob, _prepare(q, domains), params, top_k, per_domain(params, domains))


def grid_search(questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int) -> tuple[FusionParams, tuple[float, float]]:
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
                sc = np.array([scores(pr, c, params, top_k) for pr, c in zip(probs, prepared, strict=True)]).mean(axis=0)
                if (sc[0], sc[1]) > best_score:
                    best, best_score = params, (float(sc[0]), float(sc[1]))
    return best, best_score


def prior_search(questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int) -> tuple[FusionParams, tuple[float, float]]:
    prepared = [_prepare(q, domains) for q in questions]
    probs = [np.asarray(q.p, dtype=np.float64) for q in questions]

    def objective(lam: float, c: np.ndarray) -> tuple[float, float]:
        params = prior_params(lam, evidence_k)
        sc = np.array([scores(p, pr, params, top_k, c) for p, pr in zip(probs, prepared, strict=True)]).mean(axis=0)
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


SEARCHES: dict[str, Callable[[Sequence[FitQuestion], Sequence[str], int, int], tuple[FusionParams, tuple[float, float]]]] = {
    "prior": prior_search,
    "fused": grid_search,
}


def cross_validated_gain(
    questions: Sequence[FitQuestion], domains: Sequence[str], *, top_k: int, evidence_k: int, folds: int, seed: int = 0, family: str = "fused"
) -> dict:
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    fitted, uis = np.zeros(len(questions)), np.zeros(len(questions))
    for k in range(folds):
        held = set(order[k::folds])
        train = [q for i, q in enumerate(questions) if i not in held]
        if not train or not held:
            continue
        params, _ = SEARCHES[family](train, domains, top_k, evidence_k)
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
    questions: Sequence[FitQuestion], domains: Sequence[str], *, top_k: int = 5, evidence_k: int = 20, guard_folds: int = 5
) -> tuple[FusionParams, dict]:
    questions = [q for q in questions if q.gold and q.domains]
    found = {name: search(questions, domains, top_k, evidence_k) for name, search in SEARCHES.items()}
    chosen = max(found, key=lambda n: found[n][1])
    uis_scores = np.array([ranking_scores(q, domains, as_uis(found["fused"][0]), top_k) for q in questions]).mean(axis=0)
    report: dict = {
        "questions": len(questions),
        "families": {n: {"acc_at_top1": round(sc[0], 4), "mrr": round(sc[1], 4), "params": p.as_dict()} for n, (p, sc) in found.items()},
        "uis_acc_at_top1": round(float(uis_scores[0]), 4),
        "grid": {
            "sharpness": list(SHARPNESS_GRID),
            "tau0": list(TAU0_GRID),
            "unsure": list(UNSURE_GRID),
            "prior_sharpness": list(PRIOR_GRID),
            "prior_weight": list(WEIGHT_GRID),
        },
    }
    if guard_folds >= 2 and len(questions) >= guard_folds:
        checks = {n: cross_validated_gain(questions, domains, top_k=top_k, evidence_k=evidence_k, folds=guard_folds, family=n) for n in SEARCHES}
        paying = [n for n in checks if checks[n]["pays"]]
        chosen = max(paying, key=lambda n: checks[n]["acc_at_top1"]) if paying else "uis"
        report["guard"] = {**checks, "chosen": chosen}
    best = as_uis(found["fused"][0]) if chosen == "uis" else found[chosen][0]
    report["chosen"] = chosen
    report["acc_at_top1"] = report["uis_acc_at_top1"] if chosen == "uis" else round(found[chosen][1][0], 4)
    return best, report
