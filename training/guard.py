"""The guard a fitted change to the ranking passes before it is adopted.

A change (a page prior, a reranker's weight) is chosen on the validation questions and scored by a k-fold
cross-fit (each fold by the choice fitted on the others); it is adopted only when the questions the cross-fit
wins from the unchanged ranking outnumber those it loses by a one-sided sign test at 95%:
wins - losses > z * sqrt(wins + losses). The fused strategy's guard uses the same test (its simplest family
needs only more wins than losses: z 0).
"""

from __future__ import annotations

import math
import random

import numpy as np
from sklearn.model_selection import PredefinedSplit

#: z of the one-sided sign test at 95%.
SIGN_TEST_Z = 1.645


def pays(wins: int, losses: int, z: float = SIGN_TEST_Z) -> bool:
    """Whether ``wins`` questions won against ``losses`` lost pass the one-sided sign test."""
    return wins - losses > z * math.sqrt(wins + losses)


def crossfit_folds(n: int, folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) indices of each fold of a cross-fit of ``n`` items: a seeded shuffle dealt round-robin into
    ``folds`` folds (scikit-learn's PredefinedSplit of that assignment); a fold with nothing to train on is left out."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    test_fold = np.empty(n, dtype=np.int64)
    test_fold[order] = np.arange(n) % folds
    return assigned_folds(test_fold)


def permuted_folds(n: int, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Each of ``n`` items' fold: a permutation drawn from ``rng`` dealt round-robin into ``folds`` folds."""
    return rng.permutation(n) % max(1, folds)


def assigned_folds(test_fold: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) indices of each fold of the assignment ``test_fold`` (scikit-learn's PredefinedSplit), in fold
    order; a fold with no item, or with nothing to train on, is left out."""
    if not len(test_fold):
        return []
    return [(train, test) for train, test in PredefinedSplit(np.asarray(test_fold)).split() if len(train)]
