"""Whether a decision fitted on labelled questions serves, or its robust default: the record stored with it.

A decision fitted beside the ranking ("not covered", the answer policy, the by-product split) replaces its default
only when there are enough labelled questions to tell (a setting) and its cross-fitted figure on them (each question
decided by a fit that did not see it) is no lower than the default's on the same questions
(:func:`training.fallback.decide`). The record says which serves and why, in the stored artifact (``fit.decision``),
``fedqa status`` and ``/readyz``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from service.artifacts import read_stored
from service.choices import Choice


class Verdict(Choice):
    """Which decision serves, and why."""

    FITTED = "fitted"  # enough labelled questions, and no worse out of sample than the default
    TOO_FEW = "too_few"  # the default: too few labelled questions to fit and measure it
    WORSE = "worse"  # the default: the fitted one measured worse out of sample


@dataclass(frozen=True)
class FitDecision:
    """The verdict, the labelled questions it was made on (and the number needed), and the out-of-sample figure
    (higher is better) of the fitted decision and of the default on those questions (None: not measured)."""

    verdict: Verdict
    questions: int
    needed: int
    metric: str
    fitted: float | None = None
    default: float | None = None

    @property
    def serves_fitted(self) -> bool:
        """The fitted decision serves (else the default)."""
        return self.verdict is Verdict.FITTED

    def says(self) -> str:
        """The verdict in plain words, one line."""
        figures = f"{self.metric} {_fmt(self.fitted)} vs {_fmt(self.default)}"
        if self.verdict is Verdict.TOO_FEW:
            return f"default: {self.questions} labelled questions, too few to fit (need {self.needed})"
        if self.verdict is Verdict.WORSE:
            return f"default: fitted one measured worse out of sample ({figures} default)"
        return f"fitted on {self.questions} labelled questions, no worse out of sample ({figures} default)"

    @model_serializer(mode="wrap")
    def _with_says(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The stored form carries :meth:`says` for its readers (it is not read back)."""
        return {**handler(self), "says": self.says()}

    def to_json(self) -> dict[str, Any]:
        """The stored form (in a fitted decision's ``fit.decision``)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = "fit.decision") -> FitDecision:
        """Read the stored form (``says`` ignored); ValueError naming ``name`` when a field is missing or invalid."""
        return read_stored(_STORED, data, name)


_STORED = TypeAdapter(FitDecision)


def decision_of(fit: Mapping[str, Any] | None) -> FitDecision | None:
    """The record in a stored decision's ``fit`` (None: stored before the records existed)."""
    record = (fit or {}).get("decision")
    return FitDecision.from_json(record) if record else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
