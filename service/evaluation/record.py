"""One evaluated question, typed: :class:`QuestionRecord`, the row an evaluation job stores per question and strategy.

:func:`service.evaluation.question.evaluate_question` makes it, the metric groups (:mod:`.groups`) fill its ``metrics``
and ``outcomes``, :class:`~service.evaluation.jobs.JobStore` keeps it as JSON and gives it back, and the summary, the
report and ``GET /evaluate/{id}/questions`` read it.

Its JSON is the one jobs have always stored: a required field is always written, a field with a default (``selector``,
the answer's fields, ``key_points``, ``ms``, ``judge``; an outcome's ``detail`` and ``judge``) only when it was set, so a
ranking-only record has no ``answer`` key. Keys a model does not know (a row of another version) are kept as they are.
This module is a leaf of :mod:`service.evaluation`: it imports none of its other modules.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from service.generation.modes import AnswerMode
from service.retrieval.strategies.base import QuestionRouting
from service.schemas import AnswerConfidence, Strategy

QuestionKind = Literal["uni", "cross", "oos"]  # the summary group of a question by its labels
FailureKind = Literal["parse", "call", "skipped"]  # why a judged metric has no value


class _SetOnly(BaseModel):
    """A model whose JSON holds its required fields, and a field with a default only where it was set."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields = type(self).model_fields
        return {k: v for k, v in handler(self).items() if k not in fields or fields[k].is_required() or k in self.model_fields_set}


class RankedPassage(BaseModel):
    """A passage of the ranking a question was scored on (scores rounded to 6 digits)."""

    doc_id: str
    domain: str
    title: str
    score: float
    unified_score: float


class OutcomeRecord(_SetOnly):
    """One judged metric of one question: its value, or a counted failure with its kind; ``detail``: what the judge
    said (statements, verdicts, its raw reply; written when there is some); ``judge``: who judged it."""

    value: float | None
    explanation: str | None
    error: str | None
    kind: FailureKind | None
    calls: int
    detail: dict[str, Any] = Field(default_factory=dict)
    judge: str | None = None


class SelectorRecord(_SetOnly):
    """The strategy's details (:class:`~service.retrieval.strategies.base.StrategyDetail`) as a record keeps them: the
    fields the strategy set, and its first three errors (``errors``, always written)."""

    votes: dict[str, bool | None] | None = None
    failures: int | None = None
    llm_calls: int | None = None
    fused: dict[str, float] | None = None
    reason: str | None = None
    given: list[str] | None = None
    questions: list[QuestionRouting] | None = None
    errors: list[str]


class QuestionRecord(_SetOnly):
    """One question asked with one strategy: the question, its ranking and routing, its metrics and judged outcomes
    and, when it was answered, the answer (``answer`` ... ``confidence``); ``ms``: the whole question's time."""

    qid: str
    query: str
    domains: list[str]
    kind: QuestionKind
    strategy: Strategy
    position: int  # the question's index in the job
    gold_doc_ids: list[str]
    ranking: list[RankedPassage]
    active_domains: list[str]
    fallback: bool
    probabilities: dict[str, float]
    metrics: dict[str, float | None]  # every metric's value in report order (None: not scored, or a failed judge)
    outcomes: dict[str, OutcomeRecord]  # the judged metrics'
    selector: SelectorRecord | None = None
    answer: str | None = None
    answer_mode: AnswerMode | None = None
    answer_error: str | None = None
    generate_ms: float | None = None  # from the ranking to the answer
    confidence: AnswerConfidence | None = None
    key_points: list[str] | None = None  # RAGEval's key points of the reference answer
    ms: float | None = None
    judge: str | None = None

    def stored(self) -> dict[str, Any]:
        """The record as the job store keeps it and the API shows it (JSON types)."""
        return self.model_dump(mode="json")
