"""The rule that lets a decision fitted on labelled questions replace its robust default.

A fitted decision ("not covered", the answer policy, the by-product split) serves only when

1. there are at least ``needed`` labelled questions to fit it on (a setting: ``not_covered_min_questions``,
   ``decision_min_questions``), and never fewer than the cross-fit's folds; and
2. its cross-fitted figure on them (each question decided by a fit on the other folds, so never by a fit that saw
   it) is no lower than the default's figure on the same questions (the default is fitted on no labelled
   question, so its figure there is out of sample too).

Otherwise the default serves and the record (:class:`service.decisions.FitDecision`) says why.
"""

from __future__ import annotations

from collections.abc import Callable

from service.decisions import FitDecision, Verdict


def enough(needed: int, folds: int) -> int:
    """The labelled questions a fit needs: the setting's count, and at least one per fold of its cross-fit."""
    return max(needed, folds)


def decide(questions: int, needed: int, metric: str, measure: Callable[[], tuple[float, float]], *, folds: int = 5) -> FitDecision:
    """The verdict for a decision fitted on ``questions`` labelled questions. ``measure()`` (called only when there
    are enough) gives the fitted decision's cross-fitted figure and the default's figure on the same questions,
    both on the scale of ``metric`` (higher is better)."""
    need = enough(needed, folds)
    if questions < need:
        return FitDecision(Verdict.TOO_FEW, questions, need, metric)
    fitted, default = measure()
    verdict = Verdict.FITTED if fitted >= default else Verdict.WORSE
    return FitDecision(verdict, questions, need, metric, round(float(fitted), 4), round(float(default), 4))
