"""One score serves and fits: on the demo home, the U the fits compute for a question's candidates (the fused fit's
vectorised arrays, the page prior fit's ranking) equals the U ``/ask``'s pipeline serves them with, candidate for
candidate, in the same order (service/retrieval/unified.py is the one implementation both call)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.retrieval.federated import search_domains
from service.retrieval.passage import point_id
from service.retrieval.results import Prepared
from service.retrieval.unified import ranking, tie_ranks
from service.routing.fusion import FusionParams
from training.fusion import FitQuestion, FitSet, fit_unified, prior_params
from training.page_prior import Pages, Ranked, Setting, prior_questions, unseen

TOP_K = 5
EVIDENCE_K = 20
DEPTH = 20  # the page prior's depth in these checks: the served search then reads each domain's top 20, as the fit


def _fit_questions(pipeline, n: int = 24) -> tuple[list[tuple[str, Prepared]], list[FitQuestion]]:  # noqa: ANN001
    """The demo's first ``n`` labelled questions as the router's fits see them (calibrated p, every domain's hits), and
    as the pipeline prepared them (their vectors and p: the same question embedded alone differs in the last digits, and so its U)."""
    from service.demo import QUERIES
    from service.queries import load_queries

    qs = [q for q in load_queries(QUERIES) if q.gold_doc_ids and q.domains][:n]
    domains = list(pipeline.domains)
    preps = pipeline.prepare_many([q.query for q in qs])
    out = [
        FitQuestion(
            np.array([pr.probs[d] for d in domains]),
            search_domains(pipeline.store, pr.vector, domains, 30)[0],
            list(q.domains),
            set(q.gold_doc_ids),
            pr.vector,
        )
        for q, pr in zip(qs, preps, strict=True)
    ]
    return [(q.query, pr) for q, pr in zip(qs, preps, strict=True)], out


def _fit_ranking(fs: FitSet, i: int, u: np.ndarray) -> list[tuple[str, str, float]]:
    """Question ``i``'s top ``TOP_K`` (domain, point id, U) from the fit's candidate arrays and their U row ``u``."""
    q = fs.questions[i]
    rows = [(d, h.point_id, h.score) for d in fs.domains for h in q.hits.get(d, [])]
    by_tie = dict(zip(tie_ranks([r[2] for r in rows], [r[1] for r in rows], [r[0] for r in rows]).tolist(), rows, strict=True))
    slots = ranking(np.where(fs.cand.valid[i], u, np.nan), fs.cand.tie[i]).tolist()[:TOP_K]
    return [(by_tie[int(fs.cand.tie[i, k])][0], by_tie[int(fs.cand.tie[i, k])][1], float(u[k])) for k in slots]


def _served(pipeline, asked: tuple[str, Prepared]) -> list[tuple[str, str, float]]:  # noqa: ANN001
    query, prep = asked
    ret = pipeline.retrieve(query, top_k=TOP_K, strategy="fused", gate_mode="deterministic", prepared=prep, rerank=False)
    return [(h.passage.domain, point_id(h.passage.doc_id), h.unified_score) for h in ret.hits]


def _serving(pipeline, **fitted):  # noqa: ANN001, ANN202
    """The pipeline as the default strategy serves with ``fitted``'s parameters and merge alone (no ranking model, no
    lexical fusion); what to put back."""
    saved = (pipeline.router.fitted, pipeline.ranking, pipeline.lexical)
    pipeline.router.fitted = replace(pipeline.router.fitted, **fitted)
    pipeline.ranking = pipeline.lexical = None
    return saved


def test_the_fused_fit_scores_each_candidate_as_the_served_merge(demo_pipeline):
    preps, qs = _fit_questions(demo_pipeline)
    domains = list(demo_pipeline.domains)
    settings = [
        FusionParams(
            w_prior=0.8,
            w_best=3.0,
            w_share=1.0,
            bias=-0.3,
            sharpness=1.0,
            tau0=0.4,
            unsure=0.35,
            evidence_k=EVIDENCE_K,
            domain_weight={domains[0]: 1.08},
        ),  # the fused family: q read from the evidence, the gate, the unsure fallback, c_j
        FusionParams(
            w_prior=0.8, w_best=3.0, w_share=1.0, bias=-0.3, sharpness=0.0, tau0=0.8, unsure=0.35, evidence_k=EVIDENCE_K
        ),  # weight 1 behind the gate: the domains it drops would otherwise rank
        prior_params(0.05, EVIDENCE_K, {domains[1]: 0.94, domains[-1]: 1.06}),  # the prior family
        FusionParams.paper(0.5, EVIDENCE_K),  # the paper's U = p * s+ behind its gate
    ]
    fs = FitSet.of(qs, domains, TOP_K, EVIDENCE_K)
    compared = 0
    for params in settings:
        u = fit_unified(fs, params)
        saved = _serving(demo_pipeline, fusion=params, page_prior=None)
        try:
            for i, prep in enumerate(preps):
                served = _served(demo_pipeline, prep)
                assert served == _fit_ranking(fs, i, u[i]), (params, prep[0])  # exactly equal U, same candidates, same order
                compared += len(served)
        finally:
            demo_pipeline.router.fitted, demo_pipeline.ranking, demo_pipeline.lexical = saved
    assert compared >= len(preps) * len(settings) * 3


def test_the_page_prior_fit_scores_each_candidate_as_the_served_merge(demo_pipeline):
    """The prior's bonus and known answers' demotion at a setting: the fit's ranking of a held-out question (counts of
    the questions sharing its answer left out) is the served one under ``unseen``, U for U."""
    preps, qs = _fit_questions(demo_pipeline)
    domains = list(demo_pipeline.domains)
    stored = demo_pipeline.router.fitted.page_prior
    assert stored is not None and stored.known and stored.questions  # the demo router counted its labelled questions
    pages = Pages.of(stored)
    fusion = prior_params(0.05, EVIDENCE_K)
    held = prior_questions(qs, domains, fusion)
    demoted = 0
    for setting in (Setting(0.05, DEPTH), Setting(0.1, DEPTH, 0.3, 0.9), Setting(0.0, DEPTH, 1.0, 0.95)):
        saved = _serving(
            demo_pipeline, fusion=fusion, page_prior=replace(stored, weight=setting.weight, depth=DEPTH, penalty=setting.penalty, match=setting.match)
        )
        try:
            for prep, q, pq in zip(preps, qs, held, strict=True):
                ev = pages.evidence((h.point_id for hs in pq.per_domain.values() for h in hs), pq.gold_docs, pq.vector)
                fit = Ranked.of(pq, ev, DEPTH).ranking(setting, TOP_K)
                with unseen(demo_pipeline, q.gold):
                    assert _served(demo_pipeline, prep) == fit, (setting, prep[0])
                demoted += sum(1 for pid, c in ev.nearest.items() if c < setting.match and setting.penalty > 0 and pid in {f[1] for f in fit})
        finally:
            demo_pipeline.router.fitted, demo_pipeline.ranking, demo_pipeline.lexical = saved
    assert demoted > 0  # some ranked candidate was a known answer the setting demoted
