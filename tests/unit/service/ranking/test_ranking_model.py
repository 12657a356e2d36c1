"""The candidate pool and its named features (service/ranking/features.py), and the ranking model's score over them
(service/ranking/model.py): what a pool holds, what each feature reads, w . x, the order, the served candidates and
the stored form (the fit: tests/unit/training/test_ranking.py; served through a pipeline:
tests/integration/retrieval/test_ranking_served.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.ranking.features import FEATURES, RERANK_FEATURES, Feature, Pool, candidate_pool, reranked
from service.ranking.model import FittedOn, RankingMetrics, RankingModel, load_ranking, save_ranking
from service.retrieval.lexical import LexicalHits
from service.retrieval.page_prior import PagePrior
from service.retrieval.passage import Hit, point_id

ON = FittedOn(index="index-1", retriever="retriever-1", router="router-1", data="abc", questions=3)
FIGURES = RankingMetrics(questions=3, folds=0, acc_at_top1=0.5, default_acc_at_top1=0.4, wins=1, losses=0, in_sample_acc_at_top1=0.6)


def _model(weights: dict[Feature, float], *, active: bool = True, rerank_depth: int | None = None, on: FittedOn = ON) -> RankingModel:
    return RankingModel(
        features=tuple(weights), weights=tuple(weights.values()), depth=3, active=active, fitted_on=on, metrics=FIGURES, rerank_depth=rerank_depth
    )


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def _pool() -> Pool:
    per = {
        "a": [Hit(point_id("a#0"), 0.8), Hit(point_id("a#1"), 0.6), Hit(point_id("a#2"), 0.5), Hit(point_id("a#3"), 0.4)],
        "b": [Hit(point_id("b#0"), 0.7)],
    }
    lexical = LexicalHits({"a": [Hit(point_id("a#3"), 9.0), Hit(point_id("a#1"), 3.0)], "b": [Hit(point_id("b#0"), 2.0)]})
    prior = PagePrior(
        weight=0.0,
        depth=10,
        members={"faq": ["a#0", "a#1"]},
        answers={"q1": ["a#0"], "q2": ["a#0"]},
        questions={"q1": _unit(1, 0), "q2": _unit(0.6, 0.8)},
    )
    return candidate_pool(per, {"a": 1.0, "b": 1.0}, {"a": 0.8, "b": 0.2}, 3, lexical=lexical, prior=prior, vector=_unit(1, 1))


def _row(pool: Pool, doc_id: str) -> dict[Feature, float]:
    i = [e.point_id for e in pool.entries].index(point_id(doc_id))
    return dict(zip(FEATURES, pool.matrix[i].tolist(), strict=True))


def test_a_pool_is_each_domains_dense_top_depth_and_lexical_top_depth_each_passage_once():
    pool = _pool()
    ids = [e.point_id for e in pool.entries]
    assert sorted(ids) == sorted(point_id(d) for d in ("a#0", "a#1", "a#2", "a#3", "b#0"))  # a#3: below depth 3, found by BM25
    assert len(set(ids)) == len(ids)
    only = _row(pool, "a#3")
    assert only[Feature.LEXICAL_ONLY] == 1.0 and only[Feature.SIMILARITY] == 0.5  # the lowest s its domain's dense search gave
    assert _row(pool, "a#1")[Feature.LEXICAL_ONLY] == 0.0


def test_each_feature_reads_the_question_the_router_the_page_prior_and_bm25():
    pool = _pool()
    a0, a1, a3, b0 = (_row(pool, d) for d in ("a#0", "a#1", "a#3", "b#0"))
    assert a0[Feature.LOG_PRODUCT_PROBABILITY] == pytest.approx(math.log(0.8)) and b0[Feature.LOG_PRODUCT_PROBABILITY] == pytest.approx(math.log(0.2))
    assert a0[Feature.DOMAIN_BEST_GAP] == 0.0 and b0[Feature.DOMAIN_BEST_GAP] == pytest.approx(0.7 - 0.8)
    assert a0[Feature.PAGE_ANSWERS] == a1[Feature.PAGE_ANSWERS] == pytest.approx(math.log(3)) and a3[Feature.PAGE_ANSWERS] == 0.0
    # a#0 answers q1 and q2: its cosine is the nearest one's (q2 at 45 degrees less 8 from the question)
    assert a0[Feature.IS_KNOWN_ANSWER] == 1.0 and a0[Feature.KNOWN_ANSWER] == pytest.approx(float(_unit(0.6, 0.8) @ _unit(1, 1)), abs=1e-6)
    assert a0[Feature.KNOWN_ANSWER_SQUARED] == pytest.approx(a0[Feature.KNOWN_ANSWER] ** 2)
    assert a1[Feature.IS_KNOWN_ANSWER] == 0.0 and a1[Feature.KNOWN_ANSWER] == 0.0 and a1[Feature.KNOWN_ANSWER_SQUARED] == 0.0
    assert a3[Feature.BM25_SHARE] == 1.0 and a1[Feature.BM25_SHARE] == pytest.approx(3 / 9) and b0[Feature.BM25_SHARE] == 1.0  # per product
    assert a0[Feature.BM25_SHARE] == 0.0
    k = 60.0  # the reciprocal rank fusion's constant
    assert a0[Feature.DENSE_RECIPROCAL_RANK] == 1 / (k + 1) and b0[Feature.DENSE_RECIPROCAL_RANK] == 1 / (k + 2)  # across products
    assert a3[Feature.DENSE_RECIPROCAL_RANK] == 0.0  # not a dense hit
    assert a3[Feature.LEXICAL_RECIPROCAL_RANK] == 1 / (k + 1) and a1[Feature.LEXICAL_RECIPROCAL_RANK] == 1 / (k + 2)
    assert b0[Feature.LEXICAL_RECIPROCAL_RANK] == 1 / (k + 3) and a0[Feature.LEXICAL_RECIPROCAL_RANK] == 0.0


def test_a_question_left_out_of_the_counts_changes_its_page_count_and_known_answers():
    prior = PagePrior(
        weight=0.0,
        depth=10,
        members={"faq": ["a#0", "a#1"]},
        answers={"q1": ["a#0"], "q2": ["a#1"]},
        questions={"q1": _unit(1, 0), "q2": _unit(0, 1)},
    )
    per = {"a": [Hit(point_id("a#0"), 0.8), Hit(point_id("a#1"), 0.7)]}
    full = candidate_pool(per, {"a": 1.0}, {"a": 1.0}, 5, prior=prior, vector=_unit(1, 0))
    left = candidate_pool(per, {"a": 1.0}, {"a": 1.0}, 5, prior=prior.without(["a#0"]), vector=_unit(1, 0))
    assert _row(full, "a#1")[Feature.PAGE_ANSWERS] == pytest.approx(math.log(3)) and _row(left, "a#1")[Feature.PAGE_ANSWERS] == pytest.approx(
        math.log(2)
    )
    assert _row(full, "a#0")[Feature.IS_KNOWN_ANSWER] == 1.0 and _row(left, "a#0")[Feature.IS_KNOWN_ANSWER] == 0.0


def test_the_score_is_w_dot_x_and_the_order_breaks_ties_by_s():
    pool = _pool()
    model = _model({Feature.SIMILARITY: 1.0, Feature.BM25_SHARE: 0.5})
    np.testing.assert_allclose(model.scores(pool), pool.columns([Feature.SIMILARITY])[:, 0] + 0.5 * pool.columns([Feature.BM25_SHARE])[:, 0])
    top = [pool.entries[i].point_id for i in model.order(pool)[:3]]
    assert top == [point_id("b#0"), point_id("a#3"), point_id("a#0")]  # 0.7 + 0.5 * 1, 0.5 + 0.5 * 1, then a#0's s 0.8
    flat = _model({Feature.PAGE_ANSWERS: 1.0})  # a#0 and a#1 tie: the higher s first
    assert [pool.entries[i].point_id for i in flat.order(pool)[:2]] == [point_id("a#0"), point_id("a#1")]


def test_the_served_candidates_carry_the_score_as_rank_score_and_every_feature_read():
    pool = _pool()
    model = _model({Feature.SIMILARITY: 2.0, Feature.LOG_PRODUCT_PROBABILITY: 0.1})
    ranked = model.rank(pool, {"a": 0.8, "b": 0.2}, 3)
    scores = dict(zip((e.point_id for e in pool.entries), model.scores(pool).tolist(), strict=True))
    assert [c.rank_score for c in ranked] == [scores[c.point_id] for c in ranked]
    keys = [c.rank_score for c in ranked if c.rank_score is not None]
    assert len(keys) == len(ranked) and keys == sorted(keys, reverse=True)
    shown = ranked[0].features.values()
    unscored = (Feature.KNOWN_ANSWER, Feature.RERANK)  # shown where it applies: a known answer, a logit read
    assert {str(f) for f in FEATURES if f not in unscored} <= set(shown) and shown["product_probability"] == 0.8
    assert shown["reranked"] == 0.0 and "rerank" not in shown
    assert ranked[0].unified_score == pytest.approx(ranked[0].domain_prob * ranked[0].score)


def test_a_model_serves_only_the_versions_it_was_fitted_on_and_only_when_its_guard_passed(tmp_path):
    model = _model({Feature.SIMILARITY: 1.0})
    versions = {"index": "index-1", "retriever": "retriever-1", "router": "router-1"}
    assert model.serves(versions)
    assert not model.serves({**versions, "index": "index-2"})
    assert not _model({Feature.SIMILARITY: 1.0}, active=False).serves(versions)
    save_ranking(model, tmp_path / "ranking.json")
    assert load_ranking(tmp_path / "ranking.json") == model
    assert load_ranking(tmp_path / "none.json") is None and load_ranking(None) is None


def test_the_rerankers_logit_is_a_feature_of_the_candidates_it_scored_and_neutral_for_the_rest():
    pool = _pool()
    assert not pool.columns(RERANK_FEATURES).any()  # built without a reranker: 0 and not scored
    scored = reranked(pool, {("a", point_id("a#2")): -2.5, ("b", point_id("b#0")): 4.0, ("b", point_id("a#2")): 9.0})
    assert not pool.columns(RERANK_FEATURES).any()  # the pool given is left as it was
    assert _row(scored, "a#2")[Feature.RERANK] == -2.5 and _row(scored, "a#2")[Feature.RERANKED] == 1.0
    assert _row(scored, "b#0")[Feature.RERANK] == 4.0  # by (domain, point id): a#2 is no passage of b
    assert _row(scored, "a#0")[Feature.RERANK] == 0.0 and _row(scored, "a#0")[Feature.RERANKED] == 0.0
    others = [f for f in FEATURES if f not in RERANK_FEATURES]
    assert np.array_equal(scored.columns(others), pool.columns(others))
    model = _model({Feature.SIMILARITY: 1.0, Feature.RERANK: 0.5, Feature.RERANKED: 1.0}, rerank_depth=2)
    assert pool.entries[model.order(scored)[0]].point_id == point_id("b#0")  # 0.7 + 2 + 1 beats a#0's 0.8
    shown = model.rank(scored, {"a": 0.8, "b": 0.2}, 5)
    assert {c.point_id: c.features.rerank for c in shown} == {
        point_id("b#0"): 4.0,
        point_id("a#0"): None,
        point_id("a#1"): None,
        point_id("a#2"): -2.5,
        point_id("a#3"): None,
    }


def test_a_model_reading_the_reranker_serves_only_beside_the_reranker_it_was_fitted_with():
    versions = {"index": "index-1", "retriever": "retriever-1", "router": "router-1", "reranker": "reranker-1"}
    with_ce = _model({Feature.SIMILARITY: 1.0, Feature.RERANK: 0.5}, rerank_depth=20, on=ON.model_copy(update={"reranker": "reranker-1"}))
    assert with_ce.uses_reranker and with_ce.serves(versions)
    assert not with_ce.serves({**versions, "reranker": "reranker-2"}) and not with_ce.serves({**versions, "reranker": None})
    unused = _model({Feature.SIMILARITY: 1.0, Feature.RERANK: 0.0, Feature.RERANKED: 0.0}, rerank_depth=20)  # its weights 0
    assert not unused.uses_reranker and unused.serves({**versions, "reranker": None})
    assert not _model({Feature.SIMILARITY: 1.0, Feature.RERANK: 0.5}).uses_reranker  # no reranked depth: none read


@pytest.mark.parametrize(
    "weights, features",
    [
        ((1.0,), (Feature.SIMILARITY, Feature.BM25_SHARE)),
        ((1.0, 2.0), (Feature.SIMILARITY, Feature.SIMILARITY)),
        ((math.nan,), (Feature.SIMILARITY,)),
    ],
)
def test_a_model_with_mismatched_repeated_or_non_finite_weights_is_refused(weights, features):
    with pytest.raises(ValueError):
        RankingModel(features=features, weights=weights, depth=3, active=True, fitted_on=ON, metrics=FIGURES)
    with pytest.raises(ValueError):
        RankingModel.from_json(
            {
                "features": ["no such feature"],
                "weights": [1.0],
                "depth": 3,
                "active": True,
                "fitted_on": ON.model_dump(),
                "metrics": FIGURES.model_dump(),
            }
        )


def test_a_pool_refuses_a_matrix_of_another_shape():
    with pytest.raises(ValueError):
        Pool((), np.zeros((1, len(FEATURES))))


def test_a_served_candidate_shows_the_merge_weight_its_u_reads_where_it_is_not_p():
    # the pool a served model orders searches every product with weight 1 (service/pipeline.py); p_j is the router's:
    # a source shows w_j (its U's weight) beside p_j, as the merge shows it, so that U = w_j * s+ reads off its features
    pool = _pool()
    probs = {"a": 0.8, "b": 0.2}
    ranked = _model({Feature.SIMILARITY: 1.0, Feature.LOG_PRODUCT_PROBABILITY: 0.1}).rank(pool, probs, 5)
    for c in ranked:
        f = c.features
        assert f.weight == c.domain_prob == 1.0 and f.product_probability == probs[c.domain]
        assert c.unified_score == pytest.approx(f.weight * max(f.similarity or 0.0, 0.0))
    same = candidate_pool({"a": [Hit(point_id("a#0"), 0.8)]}, {"a": 0.8}, probs, 3)  # w_j = p_j (mkpqa's): not repeated
    assert _model({Feature.SIMILARITY: 1.0}).rank(same, probs, 1)[0].features.weight is None


def test_equal_scores_rank_in_the_merges_tie_order():
    # every candidate scores 0: the order is U's tie order (service/retrieval/unified.py): s, then point id, then domain
    per = {"a": [Hit("p2", 0.5), Hit("p1", 0.5), Hit("p3", 0.7)], "b": [Hit("p1", 0.5)]}
    pool = candidate_pool(per, {"a": 1.0, "b": 1.0}, {"a": 0.5, "b": 0.5}, 5)
    order = [(pool.entries[i].domain, pool.entries[i].point_id) for i in _model({Feature.PAGE_ANSWERS: 1.0}).order(pool)]
    assert order == [("a", "p3"), ("a", "p1"), ("b", "p1"), ("a", "p2")]


def test_it_says_whether_it_serves_and_what_its_guard_did():
    versions = {"index": ON.index, "retriever": ON.retriever, "router": ON.router}
    won = _model({Feature.SIMILARITY: 1.0})
    assert (
        won.says(versions)
        == won.says()
        == ("model serves: it beat the default by the sign test (out of fold Acc@1 0.500 vs default 0.400 on 3 questions, 1 won, 0 lost)")
    )
    kept = _model({Feature.SIMILARITY: 1.0}, active=False)
    assert kept.says(versions).startswith("default ranking kept: ") and kept.why() == (
        "3 labelled questions, too few for its cross-fit (out of fold Acc@1 0.500 vs default 0.400 on 3 questions, 1 won, 0 lost)"
    )  # folds 0: the guard had too few questions
    crossfit = kept.model_copy(update={"metrics": FIGURES.model_copy(update={"folds": 3})})
    assert crossfit.why().startswith("it did not beat the default by the sign test (out of fold Acc@1 0.500")
    again = FIGURES.model_copy(update={"folds": 3, "asked_again_acc_at_top1": 0.6, "default_asked_again_acc_at_top1": 0.7})
    assert kept.model_copy(update={"metrics": again}).why().startswith("it lost asked again (Acc@1 0.600 vs default 0.700; out of fold")
    elsewhere = {**versions, "router": "router-2"}
    assert not won.serves(elsewhere)
    assert won.says(elsewhere).startswith("default ranking serves: the model was fitted on other versions (router router-1")
