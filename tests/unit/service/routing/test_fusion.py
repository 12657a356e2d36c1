"""The fused strategy's formula: s clipped at 0, lambda 0 = uis, the paper's parameters = mkpqa; the product filter; the
vectorised fit against the per-question one (tests/fusion_reference.py) on small cases (on the demo home and at full
size: tests/integration/routing/test_fusion_demo.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.retrieval.federated import merge
from service.retrieval.passage import Hit, point_id
from service.routing.fitted import RouterFitted
from service.routing.fusion import Evidence, FusionParams, domain_evidence, domain_weights, fuse, search_order
from tests import fusion_reference
from training.fusion import (
    PRIOR_GRID,
    FitQuestion,
    FitSet,
    _grid_search,
    _prior_search,
    _ranking_arrays,
    as_uis,
    fit_fusion,
    prior_params,
    ranking_scores,
)
from training.fusion_breadth import breadth_top1, fit_breadth

_DOCS: dict[str, str] = {}  # point id -> doc_id of the hits made below


def _hit(doc: str, domain: str, s: float) -> Hit:
    _DOCS[point_id(doc)] = doc
    return Hit(point_id(doc), s)


def test_a_higher_p_never_lowers_u_even_for_negative_similarity():
    per = {"a": [_hit("a1", "a", -0.30), _hit("a2", "a", 0.20)], "b": [_hit("b1", "b", -0.10), _hit("b2", "b", 0.05)]}
    for doc in ("a1", "a2", "b1"):
        u = [next(r.unified_score for r in merge(per, {"a": p, "b": p}, 10) if _DOCS[r.point_id] == doc) for p in (0.1, 0.5, 0.9)]
        assert u == sorted(u), (doc, u)  # non-decreasing in p
        assert min(u) >= 0.0
    # With the raw U = p * s, raising a's p from 0.1 to 0.9 would push a1 (s < 0) below b1; clipped, it stays tied
    # at U = 0 and the raw score decides, so the order of negative-similarity passages no longer depends on p.
    low = [_DOCS[r.point_id] for r in merge(per, {"a": 0.1, "b": 0.5}, 10)]
    high = [_DOCS[r.point_id] for r in merge(per, {"a": 0.9, "b": 0.5}, 10)]
    assert low[-2:] == high[-2:] == ["b1", "a1"]
    assert high[0] == "a2"  # a positive similarity with a higher weight goes first


def test_sharpness_zero_is_uis_and_sharpness_one_is_the_paper_weight():
    q = np.array([0.9, 0.05, 0.3])
    assert domain_weights(q, 0.0).tolist() == [1.0, 1.0, 1.0]
    assert domain_weights(q, 1.0).tolist() == q.tolist()
    per = {"a": [_hit("a1", "a", 0.5)], "b": [_hit("b1", "b", 0.8)], "c": [_hit("c1", "c", 0.6)]}
    ds = ["a", "b", "c"]
    uis = merge(per, {d: 1.0 for d in ds}, 3)
    lam0 = merge(per, dict(zip(ds, domain_weights(q, 0.0), strict=True)), 3)
    assert [_DOCS[h.point_id] for h in lam0] == [_DOCS[h.point_id] for h in uis] == ["b1", "c1", "a1"]
    paper = merge(per, dict(zip(ds, q, strict=True)), 3)
    lam1 = merge(per, dict(zip(ds, domain_weights(q, 1.0), strict=True)), 3)
    assert [_DOCS[h.point_id] for h in lam1] == [_DOCS[h.point_id] for h in paper] == ["a1", "c1", "b1"]


def test_paper_parameters_leave_p_unchanged_and_evidence_moves_q():
    per = {"a": [_hit("a1", "a", 0.7), _hit("a2", "a", 0.6)], "b": [_hit("b1", "b", 0.4)]}
    ev = domain_evidence(per, ["a", "b"], 2)
    assert ev.best.tolist() == pytest.approx([0.0, -0.3]) and ev.share.tolist() == [1.0, 0.0]
    p = np.array([0.2, 0.7])
    assert fuse(p, ev, FusionParams.paper(0.5)).tolist() == p.tolist()
    trust_evidence = FusionParams(w_prior=1.0, w_best=5.0, w_share=2.0, bias=0.0, sharpness=1.0, tau0=0.5, unsure=0.0, evidence_k=2)
    q = fuse(p, ev, trust_evidence)
    assert q[0] > p[0] and q[1] < p[1]  # the domain holding the best hits gains, the other loses
    assert (
        fuse(
            p,
            Evidence(np.zeros(2), np.full(2, 0.5)),
            FusionParams(w_prior=1.0, w_best=0.0, w_share=0.0, bias=0.0, sharpness=1.0, tau0=0.5, unsure=0.0, evidence_k=2),
        ).tolist()
        == p.tolist()
    )


QUERIES = [
    "How do I import contacts from a spreadsheet?",
    "Can I get a refund and will the help desk ticket be closed?",
    "rotate api keys",
    "export survey results",
]


def _routing_questions(n: int, router: str, seed: int) -> list[FitQuestion]:
    """Questions over domains a/b, one gold passage each in its own domain, one passage of the other domain.

    ``router="informative"``: the other domain's passage has the slightly higher s (uis is always wrong) and the
    router's p says the gold domain (0.9 vs 0.1). ``"misleading"``: the gold passage has the slightly higher s
    (uis is always right) and p says the other domain. ``"random"``: which passage has the higher s and both p
    are random: any routing setting that wins on these questions wins by chance."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        gold_dom, other = ("a", "b") if rng.random() < 0.5 else ("b", "a")
        if router == "informative":
            s_gold, s_other, p_gold, p_other = 0.60, 0.62, 0.9, 0.1
        elif router == "misleading":
            s_gold, s_other, p_gold, p_other = 0.62, 0.60, 0.1, 0.9
        else:
            s_gold, s_other = (0.60, 0.62) if rng.random() < 0.5 else (0.62, 0.60)
            p_gold, p_other = rng.uniform(0.05, 0.95, size=2)
        p = {gold_dom: p_gold, other: p_other}
        hits = {gold_dom: [_hit(f"g{i}", gold_dom, s_gold)], other: [_hit(f"x{i}", other, s_other)]}
        out.append(FitQuestion(np.array([p["a"], p["b"]]), hits, [gold_dom], {f"g{i}"}))
    return out


def test_the_guard_keeps_a_family_that_pays_out_of_fold_and_falls_back_to_uis_when_none_does():
    params, report = fit_fusion(_routing_questions(60, "informative", 0), ["a", "b"], top_k=5, evidence_k=2)
    assert report["guard"]["fused"]["wins"] == report["guard"]["prior"]["wins"] == 60
    assert report["guard"]["fused"]["losses"] == report["guard"]["prior"]["losses"] == 0
    # Both families rank every question right out of fold; the tie goes to the simpler prior family. Its router
    # always puts the gold domain first, so searching that one alone loses nothing: the breadth is 1.
    assert report["guard"]["chosen"] == report["chosen"] == "prior" and params == replace(prior_params(params.sharpness, 2), search_top=1)
    assert 0 < params.sharpness <= max(PRIOR_GRID) and params != as_uis(params)

    random_qs = _routing_questions(40, "random", 0)
    unguarded, report = fit_fusion(random_qs, ["a", "b"], top_k=5, evidence_k=2, guard_folds=0)
    assert unguarded != as_uis(unguarded) and report["acc_at_top1"] > report["uis_acc_at_top1"]  # won by chance
    _, report = fit_fusion(random_qs, ["a", "b"], top_k=5, evidence_k=2)
    assert not report["guard"]["fused"]["pays"]  # the wide grid needs a significant gain

    params, report = fit_fusion(_routing_questions(40, "misleading", 0), ["a", "b"], top_k=5, evidence_k=2)
    assert report["guard"]["chosen"] == "uis" and not report["guard"]["prior"]["pays"] and not report["guard"]["fused"]["pays"]
    assert (params.sharpness, params.tau0, params.unsure) == (0.0, 0.0, 0.0)  # every domain, ranked by s


def test_the_prior_family_reorders_only_hits_of_close_similarity():
    """U = p^lambda * s+: with lambda 0.05 a router sure of a (0.9 vs 0.1) lifts a's hit over b's one a few
    hundredths higher, not over one clearly higher."""
    close = FitQuestion(np.array([0.9, 0.1]), {"a": [_hit("ca", "a", 0.60)], "b": [_hit("cb", "b", 0.62)]}, ["a"], {"ca"})
    far = FitQuestion(np.array([0.9, 0.1]), {"a": [_hit("fa", "a", 0.40)], "b": [_hit("fb", "b", 0.62)]}, ["a"], {"fa"})
    assert ranking_scores(close, ["a", "b"], prior_params(0.05, 2), 5)[0] == 1.0
    assert ranking_scores(close, ["a", "b"], prior_params(0.0, 2), 5)[0] == 0.0  # lambda 0: uis
    assert ranking_scores(far, ["a", "b"], prior_params(0.05, 2), 5)[0] == 0.0


def test_fused_searches_only_the_top_k_when_its_q_reads_no_evidence():
    """The prior family (q = p) needs each domain's top-k only; a fit that reads the evidence gets its top evidence_k."""
    from service.retrieval.strategies.base import StrategyInput
    from service.retrieval.strategies.fused import select

    limits: list[int] = []

    def search(domains, limit):  # noqa: ANN001, ANN202
        limits.append(limit)
        return {d: [Hit(point_id(f"{d}{i}"), 0.9 - 0.1 * i) for i in range(limit)] for d in domains}

    prior = prior_params(0.0, 20, {"a": 1.04})
    for params, expected in ((prior, 5), (replace(prior, w_share=0.5), 20), (None, 5)):
        fitted = RouterFitted(fusion=params)
        selection = select(StrategyInput({"a": 0.7, "b": 0.3}, ["a", "b"], 0.5, search=search, top_k=5, fitted=fitted))
        assert limits[-1] == expected and set(selection.active) == {"a", "b"}


def _random_questions(n: int, m: int, seed: int, hits: int = 5) -> tuple[list[str], list[FitQuestion]]:
    """Seeded questions over m domains for the vectorised fit against the per-question one: p peaked or flat (some
    scaled down, so that the grid's "unsure" fallback and gate both act), the router on the gold domain more often
    than not; up to ``hits`` hits per domain (some domains none), similarities on a coarse grid (ties) with per-domain
    offsets (which the prior family's c_j can correct), some negative; one or two gold passages, absent for some."""
    rng = np.random.default_rng(seed)
    domains = [f"d{j}" for j in range(m)]
    offset = rng.uniform(-0.06, 0.06, m)
    out = []
    for i in range(n):
        gold_dom = int(rng.integers(m))
        p = rng.dirichlet(np.full(m, float(rng.choice([0.3, 1.0, 4.0]))))
        if rng.random() < 0.6:
            p[gold_dom] += float(rng.uniform(0.0, 1.0))
        p = p / p.max() * rng.uniform(0.15, 1.0)
        per, docs = {}, []
        for j, d in enumerate(domains):
            s = np.round(rng.uniform(-0.15, 0.6, int(rng.integers(0, hits + 1))) + offset[j] + (0.05 if j == gold_dom else 0.0), 2)
            per[d] = [_hit(f"r{seed}-{i}-{d}-{k}", d, float(x)) for k, x in enumerate(s)]
            docs += [(f"r{seed}-{i}-{d}-{k}", d) for k in range(len(s)) if j == gold_dom or rng.random() < 0.1]
        picked = [docs[k] for k in rng.choice(len(docs), size=min(len(docs), int(rng.integers(1, 3))), replace=False)]
        if not picked or rng.random() < 0.1:
            picked = [(f"r{seed}-{i}-absent", domains[gold_dom])]
        out.append(FitQuestion(p, per, sorted({d for _, d in picked}), {doc for doc, _ in picked}))
    return domains, out


def check_vectorised_searches(n: int, m: int, seed: int, top_k: int) -> None:
    """Same parameters, same (Acc@Top1, MRR), same tie-breaks as training/fusion.py before it was vectorised (the grid
    chooses a gate on the 3 domains, the prior family moves some c_j on 5, 8 and 30)."""
    domains, qs = _random_questions(n, m, seed)
    assert _grid_search(qs, domains, top_k, 4) == fusion_reference.grid_search(qs, domains, top_k, 4)
    assert _prior_search(qs, domains, top_k, 4) == fusion_reference.prior_search(qs, domains, top_k, 4)


@pytest.mark.parametrize(("n", "m", "seed", "top_k"), [(30, 2, 4, 5), (30, 3, 0, 5), (40, 5, 1, 3), (36, 8, 3, 1)])
def test_the_vectorised_searches_choose_and_score_as_the_per_question_fit(n: int, m: int, seed: int, top_k: int):
    """On 2, 3, 5 and 8 domains (30: tests/integration/routing/test_fusion_demo.py)."""
    check_vectorised_searches(n, m, seed, top_k)


def test_the_vectorised_ranking_scores_each_question_as_ranking_scores():
    """Fused q, the unsure fallback, the gate's dropped domains, c_j of 0, ties: per question, the same (Acc, MRR)."""
    rng = np.random.default_rng(7)
    for m, top_k in ((1, 5), (3, 1), (7, 2), (31, 5)):
        domains, qs = _random_questions(25, m, 10 + m, hits=int(rng.integers(1, 8)))
        fs = FitSet.of(qs, domains, top_k, 3)
        for _ in range(15):
            c = {d: float(rng.choice([0.0, 0.9, 1.0, 1.1, 2.0])) for d in domains if rng.random() < 0.5}
            params = FusionParams(
                w_prior=float(rng.normal(1.0, 0.5)),
                w_best=float(rng.normal(0.0, 2.0)),
                w_share=float(rng.normal(0.0, 1.0)),
                bias=float(rng.normal(0.0, 1.0)),
                sharpness=float(rng.choice([0.0, 0.5, 1.0, 3.0, 6.0])),
                tau0=float(rng.choice([0.0, 0.2, 0.5, 1.0])),
                unsure=float(rng.choice([0.0, 0.3, 0.6])),
                evidence_k=3,
                domain_weight=c,
            )
            acc, mrr = _ranking_arrays(fs, params)
            ref = np.array([fusion_reference.ranking_scores(q, domains, params, top_k) for q in qs])
            assert acc.tolist() == ref[:, 0].tolist() and mrr.tolist() == ref[:, 1].tolist()
            assert [ranking_scores(q, domains, params, top_k) for q in qs] == [tuple(r) for r in ref.tolist()]


def test_the_fit_refuses_a_nan_similarity():
    """The vectorised ranking keeps each domain's hits in similarity order, which a NaN has none of."""
    domains, qs = _random_questions(10, 3, 15)
    qs[0].hits["d0"] = [_hit("nan0", "d0", float("nan")), *qs[0].hits["d0"]]
    with pytest.raises(ValueError, match="NaN"):
        fit_fusion(qs, domains, top_k=5, evidence_k=4)


@pytest.mark.parametrize(("m", "seed", "top_k"), [(2, 20, 5), (5, 21, 3), (12, 22, 1)])
def test_breadth_scores_each_breadth_as_the_ranking_of_the_domains_searched(m: int, seed: int, top_k: int):
    """Column k - 1 of breadth_top1: Acc@Top1 of the ranking made from the k heaviest domains' hits alone; the last
    column is every domain's ranking."""
    domains, qs = _random_questions(30, m, seed)
    rng = np.random.default_rng(seed)
    params = prior_params(float(rng.choice(PRIOR_GRID[1:])), 4, {d: float(rng.choice([0.9, 1.0, 1.1])) for d in domains})
    fs = FitSet.of(qs, domains, top_k, 4)
    acc = breadth_top1(fs, params)
    assert acc[:, -1].tolist() == _ranking_arrays(fs, params)[0].tolist()
    for i, q in enumerate(qs):
        order = search_order(domain_weights(q.p, params.sharpness, np.array([params.domain_weight.get(d, 1.0) for d in domains])), q.p, domains)
        for k in range(1, m + 1):
            only = FitQuestion(q.p, {d: q.hits[d] for d in order[:k]}, q.domains, q.gold)
            assert acc[i, k - 1] == ranking_scores(only, domains, params, top_k)[0]


def _peaked_questions(n: int, m: int, at: list[int]) -> tuple[list[str], list[FitQuestion]]:
    """Question i: router probabilities falling with the domain's index, its gold passage in domain at[i] (the
    at[i] + 1-th heaviest) with the best similarity, every other domain a lower hit."""
    domains = [f"d{j:02d}" for j in range(m)]
    p = np.linspace(0.9, 0.01, m)
    out = []
    for i in range(n):
        g = at[i % len(at)]
        hits = {d: [_hit(f"pk{i}-{d}", d, 0.8 if j == g else 0.5)] for j, d in enumerate(domains)}
        out.append(FitQuestion(p.copy(), hits, [domains[g]], {f"pk{i}-{domains[g]}"}))
    return domains, out


def test_the_breadth_is_the_fewest_domains_not_worse_than_every_one():
    """Gold always in the heaviest domain: one is searched. Gold in the 1st-3rd heaviest: three (two loses a third
    of the questions). Gold spread over all: every domain (search_top 0)."""
    params = prior_params(0.05, 4)
    for at, expected in (([0], 1), ([0, 1, 2], 3), (list(range(8)), 0)):
        domains, qs = _peaked_questions(48, 8, at)
        fs = FitSet.of(qs, domains, 5, 4)
        top, report = fit_breadth(fs, params, _ranking_arrays(fs, as_uis(params))[0])
        assert top == expected and report["search_top"] == expected
        assert report["acc_at_top1"] == report["acc_at_top1_every_domain"] == 1.0 and report["lost"] == 0


def test_fused_searches_only_the_fitted_breadth_heaviest_first():
    """search_top k with q = p: only the k heaviest domains are searched and ranked; 0, an unsure router or a fit
    that reads the evidence: every domain."""
    from service.retrieval.strategies.base import StrategyInput
    from service.retrieval.strategies.fused import select

    searched: list[list[str]] = []

    def search(domains, limit):  # noqa: ANN001, ANN202
        searched.append(list(domains))
        return {d: [Hit(point_id(f"{d}{i}"), 0.9 - 0.1 * i) for i in range(limit)] for d in domains}

    probs = {"a": 0.2, "b": 0.7, "c": 0.05, "d": 0.5}
    prior = replace(prior_params(0.5, 20, {"d": 1.1}), search_top=2)
    selection = select(StrategyInput(probs, list(probs), 0.5, search=search, top_k=5, fitted=RouterFitted(fusion=prior)))
    assert searched[-1] == ["b", "d"] and selection.active == ["b", "d"] and set(selection.hits or {}) == {"b", "d"}
    # lambda 0: every weight is c_j, and the router's p orders the domains of equal weight
    flat = replace(prior_params(0.0, 20, {"c": 1.1}), search_top=3)
    select(StrategyInput(probs, list(probs), 0.5, search=search, top_k=5, fitted=RouterFitted(fusion=flat)))
    assert searched[-1] == ["c", "b", "d"]
    for params, p in ((replace(prior, search_top=0), probs), (replace(prior, unsure=0.8), probs), (replace(prior, w_share=0.5), probs)):
        select(StrategyInput(p, list(p), 0.5, search=search, top_k=5, fitted=RouterFitted(fusion=params)))
        assert searched[-1] == list(probs)
