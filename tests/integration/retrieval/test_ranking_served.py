"""The ranking model through a real pipeline on the demo home: the scores the fit reads (``fedqa train ranking``'s
``collect``) are the scores that order the served passages, the sources show them, the baselines keep their order,
and the fit stores the model beside the router version (activated only by its guard)."""

from __future__ import annotations

import numpy as np
import pytest

from service.queries import load_queries
from service.ranking.features import FEATURES
from service.ranking.model import RankingModel, load_ranking, ranking_path
from tests.utils import make_settings
from training.guard import pays
from training.page_prior import unseen
from training.ranking import collect, fit_ranking, fit_weights


def _served(pipeline, model: RankingModel):  # noqa: ANN001, ANN202
    """``pipeline`` with ``model`` fitted on its versions, active."""
    v = pipeline.versions
    on = model.fitted_on.model_copy(update={"index": v["index"], "retriever": v["retriever"], "router": v["router"]})
    return model.model_copy(update={"fitted_on": on, "active": True})


def test_fit_time_and_serve_time_scores_of_the_same_questions_candidates_are_equal(demo_home, demo_pipeline):
    from service.artifacts import Registry
    from service.demo import QUERIES

    questions = [q for q in load_queries(QUERIES) if q.gold_doc_ids][:12]
    fit = fit_ranking(make_settings(demo_home), questions, save=False, pipeline=demo_pipeline, folds=3)
    assert fit.model.features == FEATURES and len(fit.oof) == len(questions)
    items = collect(demo_pipeline, questions, fit.model.depth)
    repeated = collect(demo_pipeline, questions, fit.model.depth, asked_again=True)
    assert fit_weights(items + repeated) == fit.model.weights  # the same candidates (new and asked again), the same fit
    model = _served(demo_pipeline, fit.model)
    saved = demo_pipeline.ranking
    try:
        demo_pipeline.ranking = model
        for q, item in zip(questions, items, strict=True):
            fit_scores: dict[str, list[float]] = {}  # a message's questions may share a candidate, each with its own score
            for pool in item.pools:
                for e, sc in zip(pool.entries, model.scores(pool).tolist(), strict=True):
                    fit_scores.setdefault(e.point_id, []).append(sc)
            with unseen(demo_pipeline, q.gold_doc_ids):  # as the fit ranked it: its answer not counted by the page prior
                ret = demo_pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic", rerank=False)
            for h in ret.hits:  # the served key of every passage shown is its fit-time score (no other implementation)
                assert any(h.fused_score == pytest.approx(sc, abs=1e-9) for sc in fit_scores[h.passage.point_id])
            keys = [h.rank_score for h in ret.hits]
            assert keys == sorted(keys, reverse=True)
            assert {"similarity", "log_product_probability", "page_answers", "bm25_share"} <= set(ret.hits[0].features.values())
        uis_with = demo_pipeline.retrieve(questions[0].query, top_k=5, strategy="uis", gate_mode="deterministic", rerank=False)
    finally:
        demo_pipeline.ranking = saved
    uis_without = demo_pipeline.retrieve(questions[0].query, top_k=5, strategy="uis", gate_mode="deterministic", rerank=False)
    assert [h.passage.doc_id for h in uis_with.hits] == [h.passage.doc_id for h in uis_without.hits]
    assert np.isfinite(fit.model.weights).all()
    assert ranking_path(Registry(demo_home), None) is None  # no router: no place for a model


def test_the_fit_stores_the_model_beside_the_router_version(tmp_path, demo_home):
    from service.artifacts import Registry
    from service.demo import QUERIES
    from service.files import copytree_sparse

    home = tmp_path / "home"
    copytree_sparse(demo_home, home)
    settings = make_settings(home)
    fit = fit_ranking(settings, [q for q in load_queries(QUERIES) if q.gold_doc_ids][:12], folds=3)
    registry = Registry(home)
    stored = load_ranking(ranking_path(registry, registry.active()["router"]))
    assert stored == fit.model and fit.path is not None
    m = stored.metrics
    again_no_lower = m.asked_again_acc_at_top1 is not None and m.asked_again_acc_at_top1 >= (m.default_asked_again_acc_at_top1 or 0.0)
    assert stored.active == (pays(m.wins, m.losses) and again_no_lower)


def test_status_and_readyz_name_the_ranking_model_the_demo_refresh_fitted(demo_home, demo_pipeline, monkeypatch, capsys):
    from service.api.health import decisions
    from service.artifacts import Registry
    from tests.e2e.test_first_run import status_of

    registry = Registry(demo_home)
    stored = load_ranking(ranking_path(registry, registry.active()["router"]))
    assert stored is not None  # the demo's refresh fits it on the router's held-out questions
    serves = demo_pipeline.ranking is not None
    assert serves == stored.active  # fitted on the versions that serve: its guard alone decides
    m = stored.metrics
    said = decisions(demo_pipeline)["ranking"]
    assert said["serves"] == serves and said["decision"] == stored.says(), said
    assert said["decision"].startswith("model serves" if serves else "default ranking kept") and f"{m.wins} won, {m.losses} lost" in said["decision"]
    assert f"has      ranking model: {said['decision']}" in status_of(demo_home, monkeypatch, capsys)
