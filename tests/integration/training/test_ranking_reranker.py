"""The reranker's logit as a feature of the ranking model, through a real pipeline with a trained reranker: the logit
the fit reads for a question's candidates is the logit that serving computes for them, the served order is the fit's
score over it, and no second reranking follows, also where the model gives the logit no weight."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.loading import load_pipeline
from service.queries import load_queries
from service.ranking.features import RERANK_FEATURES, Feature
from service.ranking.model import RankingModel
from training.page_prior import unseen
from training.ranking import collect, fit_ranking


def _served(pipeline, model: RankingModel) -> RankingModel:  # noqa: ANN001
    """``model`` fitted on ``pipeline``'s versions, active."""
    v = pipeline.versions
    on = model.fitted_on.model_copy(update={"index": v["index"], "retriever": v["retriever"], "router": v["router"]})
    return model.model_copy(update={"fitted_on": on, "active": True})


def test_the_rerankers_feature_is_the_same_at_fit_and_serve_time(reranker_home):
    from service.demo import QUERIES

    settings, version, _ = reranker_home
    settings = settings.model_copy(update={"rank_rerank_depth": 4})  # fewer than a pool: some candidates left unscored
    questions = [q for q in load_queries(QUERIES) if q.gold_doc_ids][:8]
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        assert pipeline.pool_reranker is not None and pipeline.versions["reranker"] == version
        fit = fit_ranking(settings, questions, save=False, pipeline=pipeline, folds=3)
        assert fit.model.rerank_depth == 4 and fit.model.fitted_on.reranker == version
        assert fit.model.uses_reranker  # its logit varies across the candidates: the fit gives it a weight
        items = collect(pipeline, questions, fit.model.depth, rerank_depth=4)
        model = _served(pipeline, fit.model)
        pipeline.ranking = model
        for q, item in zip(questions, items, strict=True):
            fit_rows: dict[str, list[tuple[float, float, float]]] = {}  # point id -> (logit, scored, score) per pool
            for pool in item.pools:
                scored = pool.columns(RERANK_FEATURES)
                assert 0 < scored[:, 1].sum() <= 4  # the default ranking's top 4 of the pool, each once
                for e, (ce, flag), sc in zip(pool.entries, scored.tolist(), model.scores(pool).tolist(), strict=True):
                    fit_rows.setdefault(e.point_id, []).append((ce, flag, sc))
            with unseen(pipeline, q.gold_doc_ids):  # as the fit ranked it
                ret = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic")  # /ask's path: rerank on
            assert ret.hits
            for h in ret.hits:
                served_ce = h.features.values().get(str(Feature.RERANK), 0.0)
                assert any(
                    served_ce == pytest.approx(ce, abs=1e-6) and h.features.reranked == flag and h.rank_score == pytest.approx(sc, abs=1e-9)
                    for ce, flag, sc in fit_rows[h.passage.point_id]
                )
                # a scored passage shows its calibrated score ("not covered" reads it), as a reranked one does
                assert (h.rerank_score is not None) == (h.features.rerank is not None)
            keys = [h.final_key for h in ret.hits]
            assert keys == sorted(keys, reverse=True)
            if len(item.pools) == 1:  # one question: the served order is the model's over its pool, not reranked after it
                pool = item.pools[0]
                assert [h.passage.point_id for h in ret.hits] == [pool.entries[i].point_id for i in model.order(pool)[:5]]
    finally:
        pipeline.close()


def test_a_model_that_does_not_read_the_reranker_is_not_reranked_after(reranker_home):
    """A model served with a reranker it gives no weight (fitted before the reranker was trained, or the fit found
    nothing in its logit) orders the passages alone: the reranker's own weight, fitted on U's scale, is not applied to
    the model's scores."""
    from service.demo import QUERIES

    settings, _, _ = reranker_home
    questions = [q for q in load_queries(QUERIES) if q.gold_doc_ids][:6]
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        fit = fit_ranking(settings, questions, save=False, pipeline=pipeline, folds=3)
        weights = [0.0 if f in RERANK_FEATURES else w for f, w in zip(fit.model.features, fit.model.weights, strict=True)]
        model = _served(pipeline, fit.model.model_copy(update={"weights": weights}))
        assert not model.uses_reranker and model.serves(pipeline.versions)
        pipeline.ranking = model
        assert pipeline.reranker is not None
        pipeline.reranker.params = replace(pipeline.reranker.params, weight=5.0)  # a reranking after it would show
        items = collect(pipeline, questions, model.depth)
        for q, item in zip(questions, items, strict=True):
            with unseen(pipeline, q.gold_doc_ids):  # as the fit ranked it
                ret = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic")  # /ask's path: rerank on
            scores = [h.rank_score for h in ret.hits if h.rank_score is not None]
            assert ret.hits and len(scores) == len(ret.hits) and scores == sorted(scores, reverse=True)
            # the model's top N still get the reranker's calibrated score, which "not covered" reads
            scored = ret.hits[: pipeline.reranker.params.depth]
            assert all(h.rerank_score is not None and h.features.rerank is not None for h in scored)
            if len(item.pools) == 1:
                pool = item.pools[0]
                assert [h.passage.point_id for h in ret.hits] == [pool.entries[i].point_id for i in model.order(pool)[:5]]
    finally:
        pipeline.close()
