"""The fused strategy on the demo home (the paper's parameters rank as mkpqa, the fit at least uis, the product
filter, the stored weights served), and the vectorised fit against the per-question one (tests/fusion_reference.py)
at full size.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.pipeline import Pipeline
from service.retrieval.federated import search_domains
from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from tests import fusion_reference
from tests.unit.service.routing.test_fusion import QUERIES, _random_questions, check_vectorised_searches
from training.fusion import (
    FitQuestion,
    cross_validated_gain,
    fit_fusion,
    prior_params,
)


def _with_fusion(pipeline: Pipeline, params: FusionParams | None) -> RouterFitted:
    """Set the router's fused parameters (None: none fitted) and no page prior (a demo build may fit one a small weight,
    whose bonus these tests of the fused parameters do not read); what it had, to put back."""
    saved = pipeline.router.fitted
    pipeline.router.fitted = replace(saved, fusion=params, page_prior=None)
    return saved


@pytest.mark.usefixtures("default_ranking_serves")  # the fused strategy's merge by U
def test_fused_with_the_papers_parameters_ranks_as_mkpqa_and_without_parameters_as_uis(demo_pipeline):
    saved = _with_fusion(demo_pipeline, FusionParams.paper(demo_pipeline.settings.tau0))
    lexical = demo_pipeline.lexical
    try:
        for query in QUERIES:
            prep = demo_pipeline.prepare(query)
            fused = demo_pipeline.retrieve(query, top_k=5, strategy="fused", prepared=prep)
            mk = demo_pipeline.retrieve(query, top_k=5, strategy="mkpqa", gate_mode="deterministic", prepared=prep)
            assert fused.routing.active_domains == mk.routing.active_domains
            assert [(h.passage.doc_id, round(h.unified_score, 9)) for h in fused.hits] == [
                (h.passage.doc_id, round(h.unified_score, 9)) for h in mk.hits
            ]
        _with_fusion(demo_pipeline, None)
        demo_pipeline.lexical = None  # the vectors alone: fused without parameters is uis
        for query in QUERIES:
            prep = demo_pipeline.prepare(query)
            fused = demo_pipeline.retrieve(query, top_k=5, strategy="fused", prepared=prep)
            uis = demo_pipeline.retrieve(query, top_k=5, strategy="uis", prepared=prep)
            assert [h.passage.doc_id for h in fused.hits] == [h.passage.doc_id for h in uis.hits]
            assert fused.routing.fallback and fused.routing.active_domains == demo_pipeline.domains
        demo_pipeline.lexical = lexical  # with the index's lexical ranking, fused (not uis) fuses it by rank
        if lexical is not None and not demo_pipeline.router.fitted.ranks:
            assert all(h.fused_score is not None for h in demo_pipeline.retrieve(QUERIES[0], top_k=5, strategy="fused").hits)
    finally:
        demo_pipeline.router.fitted = saved
        demo_pipeline.lexical = lexical


def test_fitted_fusion_is_at_least_uis_on_its_fitting_questions(demo_pipeline):
    from service.demo import QUERIES as DEMO_QUERIES
    from service.queries import load_queries

    qs = [q for q in load_queries(DEMO_QUERIES) if q.gold_doc_ids][:60]
    preps = demo_pipeline.prepare_many([q.query for q in qs])
    fit = [
        FitQuestion(
            np.array([pr.probs[d] for d in demo_pipeline.domains]),
            search_domains(demo_pipeline.store, pr.vector, demo_pipeline.domains, 20)[0],
            q.domains,
            set(q.gold_doc_ids),
        )
        for q, pr in zip(qs, preps, strict=True)
    ]
    params, report = fit_fusion(fit, demo_pipeline.domains, top_k=5, evidence_k=20)
    assert report["questions"] == len(qs)
    assert report["acc_at_top1"] >= report["uis_acc_at_top1"]  # sharpness 0 with every domain is in the grid
    assert params.w_prior > 0  # a more probable domain is more likely relevant


def test_product_filter_searches_only_the_given_domains(demo_pipeline):
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.api.state import ServiceState

    query = "How do I import contacts from a spreadsheet?"
    probs = demo_pipeline.probabilities(query)
    unlikely = min(probs, key=probs.get)
    ret = demo_pipeline.retrieve(query, top_k=5, domains=[unlikely])
    assert ret.hits and {h.passage.domain for h in ret.hits} == {unlikely}
    assert ret.routing.given and ret.routing.active_domains == [unlikely]
    assert set(ret.timings_ms) >= {f"search.{unlikely}"} and not any(k.startswith("search.") and k != f"search.{unlikely}" for k in ret.timings_ms)

    state = ServiceState(demo_pipeline.settings)
    state.pipeline = demo_pipeline
    client = TestClient(create_app(demo_pipeline.settings, state))
    two = sorted(demo_pipeline.domains)[:2]
    body = client.post("/ask", json={"query": query, "generate": False, "domains": two}).json()
    assert body["routing"]["given"] and sorted(body["routing"]["active_domains"]) == two
    assert {s["domain"] for s in body["sources"]} <= set(two)
    r = client.post("/ask", json={"query": query, "generate": False, "domains": ["nope"]})
    assert r.status_code == 422 and "domains" in r.text


@pytest.mark.usefixtures("default_ranking_serves")  # the fused strategy's merge by U
def test_served_fused_ranking_applies_the_stored_per_domain_weights(demo_pipeline):
    """The stored c_j reach /ask's ranking: U = c_j * s+ for the prior family with lambda 0, and the order follows U."""

    def first(hits, domain: str) -> int:  # noqa: ANN001
        return next(i for i, h in enumerate(hits) if h.passage.domain == domain)

    query, uis = next(
        (q, r) for q in QUERIES for r in [demo_pipeline.retrieve(q, top_k=10, strategy="uis")] if len({h.passage.domain for h in r.hits}) > 1
    )
    other = next(h.passage.domain for h in uis.hits if h.passage.domain != uis.hits[0].passage.domain)
    weights = {d: (1.1 if d == other else 0.9) for d in demo_pipeline.domains}
    saved = _with_fusion(demo_pipeline, prior_params(0.0, 20, weights))
    try:
        fused = demo_pipeline.retrieve(query, top_k=10, strategy="fused")
    finally:
        demo_pipeline.router.fitted = saved
    assert fused.routing.active_domains == demo_pipeline.domains
    for h in fused.hits:
        assert h.unified_score == pytest.approx(weights[h.passage.domain] * max(h.score, 0.0))
    assert [h.unified_score for h in fused.hits] == sorted((h.unified_score for h in fused.hits), reverse=True)
    assert first(fused.hits, other) < first(uis.hits, other)  # the weighted domain moved up


@pytest.mark.slow  # the per-question reference on 30 domains takes a while; the smaller cases are unit tests
def test_the_vectorised_searches_choose_and_score_as_the_per_question_fit_on_30_domains():
    check_vectorised_searches(24, 30, 2, 5)


@pytest.mark.slow  # the per-question reference fits each family 6 times per fit_fusion
def test_the_vectorised_guard_and_fit_report_as_the_per_question_fit():
    """cross_validated_gain and fit_fusion: the same report, the same chosen parameters."""
    domains, qs = _random_questions(32, 4, 11)
    for family in ("fused", "prior"):
        assert cross_validated_gain(qs, domains, top_k=3, evidence_k=4, folds=4, seed=3, family=family) == fusion_reference.cross_validated_gain(
            qs, domains, top_k=3, evidence_k=4, folds=4, seed=3, family=family
        )
    for m, seed, guard in ((3, 12, 5), (5, 13, 5), (6, 14, 0)):
        domains, qs = _random_questions(32, m, seed)
        qs[0].gold, qs[1].domains = set(), []  # left out of the fit
        params, report = fit_fusion(qs, domains, top_k=5, evidence_k=4, guard_folds=guard)
        breadth = report.pop("breadth", None)  # fitted after the reference was frozen, for the prior family only
        assert (breadth is not None) == (report["chosen"] == "prior")
        assert (replace(params, search_top=0), report) == fusion_reference.fit_fusion(qs, domains, top_k=5, evidence_k=4, guard_folds=guard)
