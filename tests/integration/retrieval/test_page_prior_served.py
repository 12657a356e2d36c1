"""The page prior on the demo home: applied by the served default ranking, reported by the demo router and
``fedqa status``, and the fits after the router.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from service.retrieval.page_prior import PagePrior
from training.page_prior import unseen


@pytest.mark.usefixtures("default_ranking_serves")  # the prior's bonus and demotion in U
def test_the_served_default_ranking_applies_the_prior_and_the_baselines_do_not(demo_pipeline):
    query = "How do I rotate an API key?"
    saved = demo_pipeline.router.fitted
    try:
        # the baseline without the home's own prior (a demo build may fit it a small weight: its bonus is not this test's)
        demo_pipeline.router.fitted = replace(saved, page_prior=None)
        plain = demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False)
        plain_uis = demo_pipeline.retrieve(query, top_k=5, strategy="uis", gate_mode="deterministic", rerank=False)
        last = plain.hits[-1].passage
        prior = PagePrior(weight=5.0, depth=10, members={last.source: [last.doc_id]}, answers={"q": [last.doc_id]})
        demo_pipeline.router.fitted = replace(saved, page_prior=prior)
        fused = demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False)
        assert fused.hits[0].passage.doc_id == last.doc_id
        assert fused.hits[0].unified_score == pytest.approx(plain.hits[-1].unified_score + 5.0 * math.log(2))
        given = demo_pipeline.retrieve(query, top_k=5, domains=[last.domain], rerank=False)
        assert given.hits[0].passage.doc_id == last.doc_id  # the product filter (the answers by product) too
        uis = demo_pipeline.retrieve(query, top_k=5, strategy="uis", gate_mode="deterministic", rerank=False)
        assert [h.passage.doc_id for h in uis.hits] == [h.passage.doc_id for h in plain_uis.hits]
    finally:
        demo_pipeline.router.fitted = saved


def test_the_demo_router_reports_its_page_prior_and_status_says_whether_it_is_used(demo_home, monkeypatch, capsys):
    """``fedqa train router`` (here the demo's) fits the prior on its held-out questions and stores the report."""
    from service.artifacts import Registry
    from service.routing.router import HeadRouter
    from tests.e2e.test_first_run import status_of

    registry = Registry(demo_home)
    version = registry.active()["router"]
    assert version is not None
    report = registry.manifest("router", version)["metrics"]["page_prior"]
    prior = HeadRouter.load(registry.path("router", version)).fitted.page_prior
    assert prior is not None and report["weight"] == prior.weight and report["pages"] == len(prior.pages)
    assert report["counted_questions"] == len(prior.answers) > 0 and report["questions"] > 0
    out = status_of(demo_home, monkeypatch, capsys)
    assert (f"page prior weight {prior.weight} over {len(prior.pages)} pages" if prior.active else "page prior not used") in out


@pytest.mark.usefixtures("default_ranking_serves")  # the prior's bonus and demotion in U
def test_the_served_ranking_demotes_a_known_answer_unless_the_question_is_asked_again(demo_pipeline):
    query = "How do I rotate an API key?"
    plain = demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False)
    top = plain.hits[0].passage
    vector = demo_pipeline.prepare(query).vector
    saved = demo_pipeline.router.fitted
    far = np.zeros_like(vector)
    far[int(np.argmin(vector))] = 1.0
    try:
        for asked, demoted in ((far, True), (vector, False)):
            prior = PagePrior(0.0, 10, {top.source: [top.doc_id]}, {"q": [top.doc_id]}, penalty=5.0, match=0.99, questions={"q": asked})
            demo_pipeline.router.fitted = replace(saved, page_prior=prior)
            ranked = [h.passage.doc_id for h in demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False).hits]
            assert (ranked[0] != top.doc_id) is demoted, ranked
    finally:
        demo_pipeline.router.fitted = saved


@pytest.mark.usefixtures("default_ranking_serves")  # the prior's bonus and demotion in U
def test_the_fits_after_the_router_rank_a_counted_question_as_a_new_one(demo_pipeline):
    """``unseen`` (the split rule, the answer policy and the "not covered" evidence, fitted on questions the prior
    counted) leaves the question's own count and known answer out while it is ranked, and puts the prior back."""
    from training.abstention import collect_evidence

    query = "How do I rotate an API key?"
    top = demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False).hits[0].passage
    vector = demo_pipeline.prepare(query).vector
    far = np.zeros_like(vector)
    far[int(np.argmin(vector))] = 1.0
    saved = demo_pipeline.router.fitted
    prior = PagePrior(0.0, 10, {top.source: [top.doc_id]}, {"q": [top.doc_id]}, penalty=5.0, match=0.99, questions={"q": far})
    try:
        demo_pipeline.router.fitted = replace(saved, page_prior=prior)
        counted_in = demo_pipeline.router.fitted
        assert demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False).hits[0].passage.doc_id != top.doc_id
        with unseen(demo_pipeline, [top.doc_id]):
            assert demo_pipeline.retrieve(query, top_k=5, strategy="fused", rerank=False).hits[0].passage.doc_id == top.doc_id
            alone = collect_evidence(demo_pipeline, [query])
        assert demo_pipeline.router.fitted is counted_in
        assert np.array_equal(collect_evidence(demo_pipeline, [query], gold=[[top.doc_id]]), alone)
        assert not np.array_equal(collect_evidence(demo_pipeline, [query]), alone)  # counted: its answer demoted
    finally:
        demo_pipeline.router.fitted = saved
