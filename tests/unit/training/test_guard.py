"""The cross-fit folds every fitted stage shares (training/guard.py) and the sign test that adopts a change."""

from __future__ import annotations

import numpy as np

from service.generation.abstention import FEATURES
from training.abstention import out_of_fold
from training.answer_policy import cross_fitted_f1
from training.guard import assigned_folds, crossfit_folds, pays, permuted_folds


def test_every_item_is_held_out_exactly_once_and_never_trained_on_in_its_own_fold() -> None:
    fold = permuted_folds(23, 5, np.random.default_rng(3))
    splits = assigned_folds(fold)
    held = np.concatenate([test for _, test in splits])
    assert sorted(held.tolist()) == list(range(23))
    for train, test in splits:
        assert not set(train) & set(test)
        assert len(train) + len(test) == 23
        assert len(set(fold[test].tolist())) == 1  # one fold's items


def test_a_fold_with_nothing_to_train_on_or_no_item_is_left_out() -> None:
    assert assigned_folds(np.zeros(4, dtype=np.int64)) == []  # one fold: nothing left to train on
    assert [test.tolist() for _, test in assigned_folds(np.array([0, 2, 2, 0]))] == [[0, 3], [1, 2]]  # fold 1 is empty
    assert assigned_folds(np.zeros(0, dtype=np.int64)) == []
    assert len(crossfit_folds(3, 5)) == 3  # fewer items than folds: one fold per item


def test_the_assignment_is_a_seeded_permutation_dealt_round_robin() -> None:
    a = permuted_folds(10, 3, np.random.default_rng(0))
    assert np.array_equal(a, permuted_folds(10, 3, np.random.default_rng(0)))
    assert sorted(np.bincount(a).tolist()) == [3, 3, 4]
    assert not np.array_equal(a, permuted_folds(10, 3, np.random.default_rng(1)))


def test_a_policy_chosen_on_the_other_folds_scores_each_case() -> None:
    matrix = np.array([[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]])
    # Each row is best on half the cases: whichever a fold's training cases prefer, the held-out ones lose some.
    assert 0.0 <= cross_fitted_f1(matrix, folds=3) < 1.0
    assert cross_fitted_f1(np.ones((2, 6)), folds=3) == 1.0


def test_every_fitting_question_gets_an_out_of_fold_decision() -> None:
    rng = np.random.default_rng(0)
    in_scope, out_scope = rng.normal(1.0, 0.3, (30, len(FEATURES))), rng.normal(-1.0, 0.3, (20, len(FEATURES)))
    refused, abstained, per_fold = out_of_fold(in_scope, out_scope, false_refusal=0.05, folds=5)
    assert len(per_fold) == 5 and sum(m["in_scope"] for m in per_fold) == 30 and sum(m["out_of_scope"] for m in per_fold) == 20
    assert refused.mean() <= 0.2 and abstained.mean() >= 0.8  # separable evidence: held-out decisions mostly right


def test_the_sign_test_needs_a_significant_margin() -> None:
    assert pays(10, 2) and not pays(6, 4) and not pays(0, 0)
