"""The ranking model's fit (training/ranking.py): pairwise differences from each question's pool, weights that put
the gold passage first where one feature tells it, a message's top passage across its questions, and the guard's
cross-fit (the fit through a real pipeline, equal to the served score: tests/integration/retrieval/test_ranking_served.py)."""

from __future__ import annotations

import numpy as np
import pytest

from service.ranking.features import FEATURES, Feature, candidate_pool
from service.ranking.model import FittedOn, Objective, RankingMetrics, RankingModel
from service.retrieval.lexical import LexicalHits
from service.retrieval.passage import Hit, point_id
from training.ranking import LabelledPools, crossfit, fit_weights, top_is_gold

ON = FittedOn(index=None, retriever=None, router=None, data="", questions=0)
NONE = RankingMetrics(questions=0, folds=0, acc_at_top1=0.0, default_acc_at_top1=0.0, wins=0, losses=0, in_sample_acc_at_top1=0.0)


def _question(k: int, gold_rank: int) -> LabelledPools:
    """Question ``k``: five passages of one product by falling s; its gold one (at ``gold_rank`` by s) is the one BM25
    finds best, the others BM25 finds less or not at all."""
    ids = [point_id(f"q{k}#{i}") for i in range(5)]
    per = {"a": [Hit(pid, 0.8 - 0.02 * i - 0.001 * k) for i, pid in enumerate(ids)]}
    lexical = LexicalHits({"a": [Hit(ids[gold_rank], 10.0), Hit(ids[(gold_rank + 1) % 5], 2.0 + 0.1 * k)]})
    pool = candidate_pool(per, {"a": 1.0}, {"a": 0.9}, 5, lexical=lexical)
    return LabelledPools(f"q{k}", False, (pool,), frozenset({ids[gold_rank]}), gold_rank == 0)


def _model(weights: tuple[float, ...]) -> RankingModel:
    return RankingModel(features=FEATURES, weights=weights, depth=5, active=True, fitted_on=ON, metrics=NONE)


@pytest.mark.parametrize("objective", list(Objective))
def test_the_fit_learns_the_feature_that_tells_the_gold_passage_and_ignores_one_that_never_varies(objective):
    items = [_question(k, gold_rank=k % 4 + 1) for k in range(12)]  # gold never first by s
    weights = dict(zip(FEATURES, fit_weights(items, FEATURES, objective), strict=True))
    assert weights[Feature.BM25_SHARE] > 0
    assert weights[Feature.LOG_PRODUCT_PROBABILITY] == 0.0 and weights[Feature.PAGE_ANSWERS] == 0.0  # constant here
    model = _model(tuple(weights.values()))
    assert all(top_is_gold(model, it) for it in items)
    assert not any(top_is_gold(_model(tuple(1.0 if f is Feature.SIMILARITY else 0.0 for f in FEATURES)), it) for it in items)


def test_no_gold_in_any_pool_fits_all_zero_weights():
    item = _question(0, 2)
    assert fit_weights([LabelledPools("x", False, item.pools, frozenset({"elsewhere"}), False)]) == tuple(0.0 for _ in FEATURES)


def test_a_message_s_top_passage_is_the_best_of_its_questions_top_candidates():
    first, second = _question(0, 0), _question(1, 3)
    joined = LabelledPools("joined", True, first.pools + second.pools, second.gold, False)
    s_only = _model(tuple(1.0 if f is Feature.SIMILARITY else 0.0 for f in FEATURES))
    assert not top_is_gold(s_only, joined)  # question 0's first passage has the higher s
    bm25 = _model(tuple({Feature.SIMILARITY: 1.0, Feature.BM25_SHARE: 1.0}.get(f, 0.0) for f in FEATURES))
    assert top_is_gold(bm25, LabelledPools("joined", True, second.pools + first.pools, second.gold | first.gold, False))


def test_the_cross_fit_scores_every_question_once_by_a_model_fitted_without_it():
    items = [_question(k, gold_rank=k % 4 + 1) for k in range(10)]
    held = crossfit(items, depth=5, folds=5, repeated=items)
    assert held.new.shape == held.again.shape == (10,) and set(np.unique(held.new)) <= {0.0, 1.0}
    assert held.new.mean() == 1.0  # the signal is the same in every fold
    assert crossfit(items[:3], depth=5, folds=5).new.sum() == 0  # fewer questions than folds: no cross-fit
