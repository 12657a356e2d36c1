"""Metric groups of an evaluation: one dispatch table from :class:`~service.schemas.MetricGroup` to what it does.

Each group says which metrics it produces, which of them the judge scores, how many LLM calls it
makes, and how it scores one question: from the ranking alone (``score_ranking``) and, for groups
that need a generated answer, from the answer (``score_answer``). Adding a group is one
:class:`MetricGroup` member, one :class:`Group` entry in :data:`GROUPS` and its scoring functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from service.evaluation import answers, rageval, ragxplain, wixqa
from service.evaluation.judges import Judge, Outcome
from service.evaluation.mkpqa import faithfulness, relevancy
from service.evaluation.record import OutcomeRecord, QuestionRecord
from service.evaluation.retrieval_metrics import effective_information_rate, ranking_scores, recall_at_k
from service.evaluation.spec import JobQuestion
from service.retrieval.passage import RankedHit
from service.schemas import EvalSpec, MetricGroup, Source

ANSWER_METRICS = ("relevancy", "faithfulness")
WIXQA_LEXICAL = ("token_f1", "bleu", "rouge1", "rouge2")
WIXQA_JUDGED = ("context_recall", "factuality")
RAGEVAL_JUDGED = ("completeness", "hallucination", "irrelevance")
RAGEVAL_RETRIEVAL = ("retrieval_recall", "eir")


@dataclass
class Scoring:
    """One question's retrieval (and answer) as the scoring functions read it; they write ``record``."""

    record: QuestionRecord
    query: JobQuestion
    hits: list[RankedHit]
    active_domains: list[str]
    top_k: int
    judge: Judge | None = None
    answer: str | None = None
    answer_mode: str | None = None
    answer_ms: float | None = None
    key_points: Callable[[], Outcome] | None = None
    sources: list[Source] | None = None  # the passages the answer was given from (the response's); None: not answered

    @property
    def ranked(self) -> list[str]:
        return [h.passage.doc_id for h in self.hits]

    @property
    def gold(self) -> list[str]:
        return self.query.gold_doc_ids

    @property
    def context(self) -> list[tuple[str, str]]:
        """(title, text) of the passages the answer was given from: the response's sources (an answer given by product:
        each product's passages), else the ranking's first ``top_k``."""
        if self.sources is not None:
            return [(s.title, s.text) for s in self.sources]
        return [(h.passage.title, h.passage.text) for h in self.hits[: self.top_k]]

    def outcome(self, name: str, outcome: Outcome, judge: Judge | None) -> None:
        """Record one judged metric: its value in ``metrics``, the whole outcome in ``outcomes``."""
        self.record.metrics[name] = outcome.value
        kept = OutcomeRecord.model_validate(outcome.as_dict())
        if judge is not None and outcome.kind != "skipped":
            kept.judge = judge.name
        self.record.outcomes[name] = kept

    def require_judge(self) -> Judge:
        if self.judge is None:
            raise ValueError("judge metrics need a judge")
        return self.judge


Scorer = Callable[[Scoring], None]


@dataclass(frozen=True)
class Group:
    """What one metric group produces, costs and computes."""

    metrics: Callable[[int], list[str]]  # metric names in report order, given top_k
    judged: tuple[str, ...] = ()  # the metrics whose numbers come from the judge
    answer_calls: Mapping[str, int] = field(default_factory=dict)  # LLM calls per question and strategy
    question_calls: Mapping[str, int] = field(default_factory=dict)  # LLM calls per question
    strategy_calls: Mapping[str, int] = field(default_factory=dict)  # LLM calls per strategy (dataset level)
    score_ranking: Scorer | None = None
    score_answer: Scorer | None = None

    @property
    def needs_answer(self) -> bool:
        """The group scores the answering path's answers."""
        return self.score_answer is not None

    @property
    def needs_judge(self) -> bool:
        """The group scores answers with the judge."""
        return self.score_answer is not None and bool(self.judged)


def retrieval_metric_names(top_k: int) -> list[str]:
    return ["acc_at_top1", f"recall_at_{top_k}", "mrr", "routing_accuracy", "routing_exact", "domains_searched"]


# --------------------------------------------------------------------------- scoring functions
def _retrieval(s: Scoring) -> None:
    s.record.metrics.update(ranking_scores(s.ranked, s.gold, s.active_domains, s.query.domains, s.top_k))


def _rageval_ranking(s: Scoring) -> None:
    s.record.metrics["retrieval_recall"] = recall_at_k(s.ranked, s.gold, s.top_k)
    s.record.metrics["eir"] = effective_information_rate([(h.passage.doc_id, h.passage.text) for h in s.hits], s.gold)


def _answers(s: Scoring) -> None:
    s.record.metrics.update(
        answers.scores(s.answer, s.answer_mode or "none", s.query.answer, out_of_scope=answers.is_out_of_scope(s.query), answer_ms=s.answer_ms)
    )


def _answer(s: Scoring) -> None:
    judge = s.require_judge()
    s.outcome("relevancy", relevancy(judge, s.query.query, s.answer), judge)
    s.outcome("faithfulness", faithfulness(judge, s.query.query, s.answer, s.context), judge)


def _wixqa(s: Scoring) -> None:
    judge, reference = s.require_judge(), s.query.answer
    s.record.metrics.update(wixqa.lexical(s.answer, reference))
    s.outcome("context_recall", wixqa.context_recall(judge, reference, s.context), judge)
    s.outcome("factuality", wixqa.factuality(judge, s.query.query, s.answer, reference), judge)


def _rageval_answer(s: Scoring) -> None:
    judge = s.require_judge()
    kp = s.key_points() if s.key_points else Outcome.skipped("no key points")
    if kp.value is None:
        for n in RAGEVAL_JUDGED:
            s.outcome(n, Outcome(None, error=f"key points: {kp.error}", kind=kp.kind or "skipped"), None)
        return
    outs, calls = rageval.judge_keypoints(judge, s.query.query, s.answer, kp.detail["key_points"])
    for n, o in outs.items():
        o.calls = calls if n == "completeness" else 0
        s.outcome(n, o, judge)
    s.record.key_points = kp.detail["key_points"]


def _ragxplain(s: Scoring) -> None:
    judge = s.require_judge()
    q = s.query
    for n, o in ragxplain.evaluate(judge, q.query, s.answer, s.context, q.answer, q.grading_note).items():
        s.outcome(n, o, judge)


# --------------------------------------------------------------------------- the dispatch table
GROUPS: dict[MetricGroup, Group] = {
    MetricGroup.RETRIEVAL: Group(metrics=retrieval_metric_names, score_ranking=_retrieval),
    MetricGroup.ANSWERS: Group(metrics=lambda k: list(answers.METRICS), score_answer=_answers),
    MetricGroup.ANSWER: Group(
        metrics=lambda k: list(ANSWER_METRICS),
        judged=ANSWER_METRICS,
        answer_calls={"relevancy": 1, "faithfulness": 2},
        score_answer=_answer,
    ),
    MetricGroup.WIXQA: Group(
        metrics=lambda k: [*WIXQA_LEXICAL, *WIXQA_JUDGED],
        judged=WIXQA_JUDGED,
        answer_calls={"wixqa": 2},
        score_answer=_wixqa,
    ),
    MetricGroup.RAGEVAL: Group(
        metrics=lambda k: [*RAGEVAL_JUDGED, *RAGEVAL_RETRIEVAL],
        judged=RAGEVAL_JUDGED,
        answer_calls={"rageval_labels": 1},
        question_calls={"rageval_key_points": 1},
        score_ranking=_rageval_ranking,
        score_answer=_rageval_answer,
    ),
    MetricGroup.RAGXPLAIN: Group(
        metrics=lambda k: list(ragxplain.METRICS),
        judged=tuple(ragxplain.METRICS),
        answer_calls={"ragxplain": len(ragxplain.METRICS)},
        strategy_calls={"ragxplain_insights": 1},
        score_answer=_ragxplain,
    ),
}


def metric_groups(spec: EvalSpec) -> list[MetricGroup]:
    """The spec's metric groups in table order (the order of the report and of each record's metrics)."""
    wanted = {MetricGroup(g) for g in spec.metrics}
    return [g for g in GROUPS if g in wanted]


def metric_names(spec: EvalSpec) -> list[str]:
    """The metrics a spec produces, in report order."""
    return [name for g in metric_groups(spec) for name in GROUPS[g].metrics(spec.top_k)]


def judged_metric_names(spec: EvalSpec) -> list[str]:
    """The metrics whose numbers come from the judge."""
    return [name for g in metric_groups(spec) for name in GROUPS[g].judged]


def needs_judge(spec: EvalSpec) -> bool:
    """Some metric group scores answers with the judge."""
    return any(GROUPS[g].needs_judge for g in metric_groups(spec))


def needs_answers(spec: EvalSpec) -> bool:
    """Some metric group scores the answering path's answers."""
    return any(GROUPS[g].needs_answer for g in metric_groups(spec))
