"""Fitting the ``fused`` strategy's parameters (service/routing/fusion.py) on held-out questions.

All on questions the router was not trained on:

1. a logistic regression of "domain j is one of the question's domains" on the features
   (logit of the calibrated p_j, relative best similarity, share of the unified top-k), one row per
   (question, domain): gives w_prior, w_best, w_share and bias;
2. a grid search of the sharpness lambda, the gate's tau0 and the "unsure" fallback level that
   maximises mean Acc@Top1 (then MRR) of the final ranking, computed exactly as the service ranks
   (the same fuse and merge weights, service/routing/fusion.py, and the merge's score and order,
   service/retrieval/unified.py). Ties go to the most conservative setting (lowest
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
   passes, the ranking is uis (the fused q is still shown in the routing);
5. for the prior family, the breadth (training/fusion_breadth.py): how many domains, heaviest first, need searching at
   all, the fewest whose ranking is not worse than searching every one by a one-sided sign test.

The grids are the search space, not tuned values: the chosen values are stored with the router version. The
searches score every question at once (training/fusion_scoring.py), with what does not depend on the setting
(evidence, candidate arrays: :class:`FitSet`) made once per fit and shared by the guard's folds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.linear_model import LogisticRegression

from service.retrieval.passage import Hit, point_id
from service.retrieval.unified import merge_weights, tie_ranks
from service.routing.fusion import Evidence, FusionParams, domain_evidence, domain_weights, features, fuse, fused_weights, per_domain
from service.routing.gate import gate
from training.fusion_breadth import fit_breadth
from training.fusion_scoring import Candidates, ColumnSearch, Prepared, candidates, mean_scores, rank_scores, top1_accuracy, unified
from training.guard import SIGN_TEST_Z, crossfit_folds, pays

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
    vector: np.ndarray | None = None  # its query vector (the page prior's known answers)


def _prepare(q: FitQuestion, domains: Sequence[str]) -> Prepared:
    rows = [(i, d, h.score, h.point_id) for i, d in enumerate(domains) for h in q.hits.get(d, [])]
    gold = {point_id(d) for d in q.gold}
    return Prepared(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.float64),
        tie_ranks([r[2] for r in rows], [r[3] for r in rows], [r[1] for r in rows]),
        np.array([r[3] in gold for r in rows], dtype=bool),
    )


@dataclass(frozen=True)
class FitSet:
    """Questions with what the fit reads of them whatever the setting: their evidence and candidate arrays."""

    questions: list[FitQuestion]
    domains: list[str]
    top_k: int
    evidence_k: int
    evidence: list[Evidence]
    cand: Candidates

    @classmethod
    def of(cls, questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int, *, every_hit: bool = False) -> FitSet:
        """``every_hit``: every hit a candidate (weights below 0 rank a domain's hits in reverse), not each domain's top_k."""
        prepared = [_prepare(q, domains) for q in questions]
        evidence = [domain_evidence(q.hits, domains, evidence_k) for q in questions]
        depth = max([top_k, *(len(c.s) for c in prepared)]) if every_hit else None
        return cls(list(questions), list(domains), top_k, evidence_k, evidence, candidates(prepared, len(domains), top_k, depth))

    def rows(self, idx: Sequence[int] | np.ndarray) -> FitSet:
        """The questions ``idx``, in that order."""
        questions, evidence = [self.questions[i] for i in idx], [self.evidence[i] for i in idx]
        return FitSet(questions, self.domains, self.top_k, self.evidence_k, evidence, self.cand.rows(np.asarray(idx, dtype=np.int64)))


def ranking_scores(q: FitQuestion, domains: Sequence[str], params: FusionParams, top_k: int) -> tuple[float, float]:
    """(Acc@Top1, MRR within top_k) of the fused ranking of one question under ``params``."""
    acc, mrr = _ranking_arrays(FitSet.of([q], domains, top_k, params.evidence_k), params)
    return float(acc[0]), float(mrr[0])


def fit_unified(fs: FitSet, params: FusionParams) -> np.ndarray:
    """(questions, k): U of each question's candidates (``fs.cand``) under ``params``, as the strategy serves them: the
    fused q (:func:`~service.routing.fusion.fuse`), its merge weights (:func:`~service.routing.fusion.fused_weights`),
    U (:func:`~service.retrieval.unified.unified_scores`); not finite: a domain the gate drops."""
    return unified(_merge_weights(fs, params), fs.cand)


def _merge_weights(fs: FitSet, params: FusionParams) -> np.ndarray:
    """(questions, domains): each question's merge weights under ``params``."""
    c = per_domain(params, fs.domains)
    return np.stack([fused_weights(fuse(q.p, ev, params), params, c) for q, ev in zip(fs.questions, fs.evidence, strict=True)])


def _ranking_arrays(fs: FitSet, params: FusionParams) -> tuple[np.ndarray, np.ndarray]:
    """Per question of ``fs``: (Acc@Top1, MRR within top_k) of the fused ranking under ``params``."""
    negative = bool((per_domain(params, fs.domains) < 0).any())
    if negative or params.evidence_k != fs.evidence_k:  # outside what ``fs`` holds: its candidates or evidence
        fs = FitSet.of(fs.questions, fs.domains, fs.top_k, params.evidence_k, every_hit=negative)
    return rank_scores(_merge_weights(fs, params), fs.cand)


def fit_evidence_weights(
    questions: Sequence[FitQuestion], domains: Sequence[str], evidence_k: int, evidence: Sequence[Evidence] | None = None
) -> tuple[float, float, float, float]:
    """(w_prior, w_best, w_share, bias) of the logistic model of domain relevance (``evidence``: the questions', if known)."""
    xs, ys = [], []
    for i, q in enumerate(questions):
        xs.append(features(q.p, domain_evidence(q.hits, domains, evidence_k) if evidence is None else evidence[i]))
        ys.append([1.0 if d in q.domains else 0.0 for d in domains])
    x, y = np.concatenate(xs), np.concatenate(ys)
    if len(set(y.tolist())) < 2:
        return 1.0, 0.0, 0.0, 0.0
    model = LogisticRegression(max_iter=1000).fit(x, y)
    w = model.coef_[0]
    return float(w[0]), float(w[1]), float(w[2]), float(model.intercept_[0])


def _grid_search(
    questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int, fit_set: FitSet | None = None
) -> tuple[FusionParams, tuple[float, float]]:
    """The grid's setting with the best (mean Acc@Top1, MRR) on ``questions`` (ties: the first, most conservative);
    ``fit_set``: the questions' :class:`FitSet`, if made already."""
    fs = fit_set or FitSet.of(questions, domains, top_k, evidence_k)
    w_prior, w_best, w_share, bias = fit_evidence_weights(questions, domains, evidence_k, fs.evidence)
    base = FusionParams(w_prior=w_prior, w_best=w_best, w_share=w_share, bias=bias, sharpness=0.0, tau0=0.0, unsure=0.0, evidence_k=evidence_k)
    probs = [fuse(q.p, ev, base) for q, ev in zip(questions, fs.evidence, strict=True)]
    top = np.array([pr.max() for pr in probs])
    active = {t: np.stack([gate(pr, t, mode="deterministic").active for pr in probs]) for t in TAU0_GRID if t > 0}
    best, best_score = base, (-1.0, -1.0)
    for sharp in SHARPNESS_GRID:
        power = np.stack([domain_weights(pr, sharp) for pr in probs])
        for unsure in UNSURE_GRID:
            unsure_rows = (top < unsure)[:, None]  # every weight 1
            for tau0 in TAU0_GRID:
                w = merge_weights(power, unsure_rows, active[tau0] if tau0 > 0 else None)
                if top1_accuracy(w, fs.cand.lead) < best_score[0]:  # loses on Acc@Top1 whatever its MRR
                    continue
                sc = mean_scores(*rank_scores(w, fs.cand))
                if sc > best_score:
                    best_score = sc
                    best = FusionParams(
                        w_prior=w_prior, w_best=w_best, w_share=w_share, bias=bias, sharpness=sharp, tau0=tau0, unsure=unsure, evidence_k=evidence_k
                    )
    return best, best_score


def _prior_search(
    questions: Sequence[FitQuestion], domains: Sequence[str], top_k: int, evidence_k: int, fit_set: FitSet | None = None
) -> tuple[FusionParams, tuple[float, float]]:
    """The prior family's best setting on ``questions``: for each lambda, c by coordinate ascent from 1 over
    :data:`WEIGHT_GRID` on Acc@Top1 alone (ties: the weight nearest 1: MRR as a tie-break pushed the weights to
    the grid's ends); then the lambda with the best Acc@Top1 (ties: the smallest). Acc@Top1 only needs each
    domain's first hit (:class:`~training.fusion_scoring.ColumnSearch`); MRR is scored for the reported setting."""
    fs = fit_set or FitSet.of(questions, domains, top_k, evidence_k)
    probs = [np.asarray(q.p, dtype=np.float64) for q in questions]
    unsure = np.array([p.max() < prior_params(0.0).unsure for p in probs])  # every weight 1 (never, for p >= 0)
    best, best_score, grid = prior_params(0.0, evidence_k), (-1.0, -1.0), np.array(WEIGHT_GRID)
    for lam in PRIOR_GRID:
        power = np.stack([domain_weights(p, lam) for p in probs])
        c = np.ones(len(domains))
        w = merge_weights(power * c, unsure[:, None])
        search, acc = ColumnSearch(w, fs.cand.lead), top1_accuracy(w, fs.cand.lead)
        for _ in range(WEIGHT_SWEEPS):
            for j in range(len(domains)):
                was = c[j]
                trials = search.accuracies(j, merge_weights(power[:, j, None] * grid, unsure[:, None]))
                for v, trial in zip(WEIGHT_GRID, trials, strict=True):
                    if v != c[j] and (trial > acc or (trial == acc and abs(v - 1.0) < abs(c[j] - 1.0))):
                        c[j], acc = v, trial
                if c[j] != was:
                    search.set(j, merge_weights(power[:, j] * c[j], unsure))
        if acc > best_score[0]:
            best = prior_params(lam, evidence_k, dict(zip(domains, c.tolist(), strict=True)))
            best_score = mean_scores(*rank_scores(merge_weights(power * c, unsure[:, None]), fs.cand))
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


Search = Callable[[Sequence[FitQuestion], Sequence[str], int, int, FitSet | None], tuple[FusionParams, tuple[float, float]]]


@dataclass(frozen=True)
class Family:
    """A family of settings: the search over its grid, and the z of its one-sided sign test in the guard
    (wins - losses > z sqrt(wins + losses))."""

    search: Search
    z: float


#: The families the guard chooses among, simplest first (ties go to the earlier one): the bounded prior family
#: needs more wins than losses (z 0), the gate grid a 95% test.
FAMILIES: dict[str, Family] = {"prior": Family(_prior_search, 0.0), "fused": Family(_grid_search, SIGN_TEST_Z)}


def as_uis(params: FusionParams) -> FusionParams:
    """The same fused q (shown in the routing), ranked as uis: every domain, weight 1 (sharpness 0, tau0 0, no c)."""
    return replace(params, sharpness=0.0, tau0=0.0, unsure=0.0, domain_weight={}, search_top=0)


def cross_validated_gain(
    questions: Sequence[FitQuestion],
    domains: Sequence[str],
    *,
    top_k: int,
    evidence_k: int,
    folds: int,
    seed: int = 0,
    family: str = "fused",
    fit_set: FitSet | None = None,
) -> dict:
    """Out-of-fold Acc@Top1 of one family's fitting procedure against uis: each fold is ranked with the setting
    fitted on the other folds. ``wins``/``losses``: questions whose top passage is gold under one and not the
    other; ``pays``: a one-sided sign test, wins - losses > z sqrt(wins + losses)
    with the family's z (:data:`FAMILIES`): for the fused grid at 95%, so that a gain of a few questions, which
    noise gives a search over hundreds of settings as often as routing does, does not count. ``fit_set``: the
    questions' :class:`FitSet`, if made already."""
    fs = fit_set or FitSet.of(questions, domains, top_k, evidence_k)
    fitted, uis = np.zeros(len(questions)), np.zeros(len(questions))
    for train, rows in crossfit_folds(len(questions), folds, seed):
        params, _ = FAMILIES[family].search([questions[i] for i in train], domains, top_k, evidence_k, fs.rows(train))
        fitted[rows] = _ranking_arrays(fs.rows(rows), params)[0]
        uis[rows] = _ranking_arrays(fs.rows(rows), as_uis(params))[0]
    wins, losses = int(((fitted > 0) & (uis == 0)).sum()), int(((fitted == 0) & (uis > 0)).sum())
    return {
        "folds": folds,
        "acc_at_top1": round(float(fitted.mean()), 4),
        "uis_acc_at_top1": round(float(uis.mean()), 4),
        "wins": wins,
        "losses": losses,
        "pays": pays(wins, losses, FAMILIES[family].z),
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
    fs = FitSet.of(questions, domains, top_k, evidence_k)
    found = {name: family.search(questions, domains, top_k, evidence_k, fs) for name, family in FAMILIES.items()}
    chosen = max(found, key=lambda n: found[n][1])  # the first of equals: the simpler family
    report: dict = {
        "questions": len(questions),
        "families": {n: {"acc_at_top1": round(sc[0], 4), "mrr": round(sc[1], 4), "params": p.as_dict()} for n, (p, sc) in found.items()},
        "uis_acc_at_top1": round(mean_scores(*_ranking_arrays(fs, as_uis(found["fused"][0])))[0], 4),
        "grid": {
            "sharpness": list(SHARPNESS_GRID),
            "tau0": list(TAU0_GRID),
            "unsure": list(UNSURE_GRID),
            "prior_sharpness": list(PRIOR_GRID),
            "prior_weight": list(WEIGHT_GRID),
        },
    }
    if guard_folds >= 2 and len(questions) >= guard_folds:
        checks = {
            n: cross_validated_gain(questions, domains, top_k=top_k, evidence_k=evidence_k, folds=guard_folds, family=n, fit_set=fs) for n in FAMILIES
        }
        paying = [n for n in checks if checks[n]["pays"]]
        chosen = max(paying, key=lambda n: checks[n]["acc_at_top1"]) if paying else "uis"
        report["guard"] = {**checks, "chosen": chosen}
    best = as_uis(found["fused"][0]) if chosen == "uis" else found[chosen][0]
    if chosen == "prior" and best.is_identity:  # the weights are known before searching: fit how many to search
        top, report["breadth"] = fit_breadth(fs, best, _ranking_arrays(fs, as_uis(best))[0])
        best = replace(best, search_top=top)
    report["chosen"] = chosen
    report["acc_at_top1"] = report["uis_acc_at_top1"] if chosen == "uis" else round(found[chosen][1][0], 4)
    return best, report
