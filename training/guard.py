"""The guard a fitted change to the ranking passes before it is adopted.

A change (a page prior, a reranker's weight) is chosen on the validation questions and scored by a k-fold
cross-fit (each fold by the choice fitted on the others); it is adopted only when the questions the cross-fit
wins from the unchanged ranking outnumber those it loses by a one-sided sign test at 95%:
wins - losses > z * sqrt(wins + losses). The fused strategy's guard uses the same test (its simplest family
needs only more wins than losses: z 0).
"""

from __future__ import annotations

import math

#: z of the one-sided sign test at 95%.
SIGN_TEST_Z = 1.645


def pays(wins: int, losses: int, z: float = SIGN_TEST_Z) -> bool:
    """Whether ``wins`` questions won against ``losses`` lost pass the one-sided sign test."""
    return wins - losses > z * math.sqrt(wins + losses)
