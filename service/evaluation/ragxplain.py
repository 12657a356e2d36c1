"""RAGXplain: six judged metrics with a short explanation each (the "diamond"), then dataset-level
insights and up to four prioritised action items.

Per question (one judge request per metric, each a 0-10 rating scaled to 0-1 plus an explanation):
``rx_context_relevancy`` (are the retrieved passages about the question), ``rx_context_adherence``
(is the answer grounded in them), ``rx_answer_relevancy`` (does the answer address the question),
``rx_context_recall`` (does the context hold what the reference answer needs), ``rx_factuality``
(does the answer agree with the reference) and ``rx_grading_note`` (does the answer meet the
question's grading note; the reference answer serves as the note when a question has none).

Per strategy: one request turns the aggregates and the lowest-scored explanations into insights and
at most four action items, priority 1 first. When that request fails, the failure is counted and the
action items come from fixed rules over the aggregates, labelled ``"source": "rules"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from service.evaluation.judges import Judge, Outcome, ParseError, field_number, field_text, format_context

METRICS: dict[str, str] = {
    "rx_context_relevancy": "Context relevancy: how much of the retrieved context is relevant to the question.",
    "rx_context_adherence": "Context adherence: how well the answer sticks to the retrieved context (no claims the context does not support).",
    "rx_answer_relevancy": "Answer relevancy: how directly and completely the answer addresses the question.",
    "rx_context_recall": "Context recall: how much of the information the reference answer needs is present in the retrieved context.",
    "rx_factuality": "Factuality: how far the answer's facts agree with the reference answer.",
    "rx_grading_note": "Grading note: how well the answer satisfies the grading note (what a good answer must contain).",
}

# Judged against the reference answer itself: a grading note does not stand in for it.
NEEDS_REFERENCE = ("rx_context_recall", "rx_factuality")

METRIC_PROMPT = (
    "You evaluate one aspect of a retrieval-augmented question-answering system for product documentation.\n"
    "Aspect: {definition}\n\n"
    "Question: {question}\n\n"
    "Retrieved context:\n{context}\n\n"
    "Reference answer: {reference}\n\n"
    "Grading note: {note}\n\n"
    "System answer: {answer}\n\n"
    "Rate the aspect from 0 (worst) to 10 (best) and explain the rating in one or two sentences, naming what "
    "is wrong when the rating is low.\n"
    'Reply with JSON only: {{"score": <integer 0-10>, "explanation": "<why>"}}\n'
)

INSIGHTS_PROMPT = (
    "You analyse the evaluation of a retrieval-augmented question-answering system ({strategy} retrieval).\n"
    "Mean scores (0-1) of the six RAGXplain metrics over {n} questions:\n{means}\n\n"
    "Explanations of the lowest-scored questions:\n{explanations}\n\n"
    "Write up to three insights about why answers fail, and at most four action items that would improve the "
    "system, most important first.\n"
    'Reply with JSON only: {{"insights": ["<insight>", ...], "actions": [{{"priority": 1, "metric": "<metric>", '
    '"action": "<what to change>"}}, ...]}}\n'
)

RULES = {
    "rx_context_relevancy": "Improve retrieval precision: fine-tune the retriever or the router so fewer off-topic passages reach the context.",
    "rx_context_recall": "Improve retrieval recall: search more domains (lower tau0) or retrieve more passages per domain.",
    "rx_context_adherence": "Constrain generation to the context: a stricter answer prompt or a stronger LLM to stop unsupported claims.",
    "rx_answer_relevancy": "Make answers address the question directly: shorter, question-first answer prompt.",
    "rx_factuality": "Fix factual errors: check the top passages are current and that the LLM quotes them faithfully.",
    "rx_grading_note": "Cover the expected content: include the required steps or facts named in the grading notes.",
}


def _metric_parse(obj: Any) -> tuple[float, str]:
    return field_number(obj, ["score", "rating"], 0, 10) / 10.0, field_text(obj, ["explanation", "reason"])


def evaluate(
    judge: Judge, question: str, answer: str | None, context: Sequence[tuple[str, str]], reference: str | None, grading_note: str | None
) -> dict[str, Outcome]:
    """The six RAGXplain metrics of one answer (one judge request each)."""
    if not answer:
        return {m: Outcome.skipped("no answer to judge") for m in METRICS}
    out = {}
    note = grading_note or reference
    for metric, definition in METRICS.items():
        if metric in NEEDS_REFERENCE and not reference:
            out[metric] = Outcome.skipped("no reference answer")  # counted under failures as "skipped"
            continue
        if metric == "rx_grading_note" and not note:
            out[metric] = Outcome.skipped("no reference answer or grading note")
            continue
        prompt = METRIC_PROMPT.format(
            definition=definition,
            question=question,
            context=format_context(context, words=120),
            reference=reference or "(none)",
            note=note or "(none)",
            answer=answer,
        )
        call = judge.ask(prompt, _metric_parse, max_tokens=160)
        if call.kind:
            out[metric] = Outcome.failed(call)
        else:
            score, expl = call.value
            out[metric] = Outcome(score, explanation=expl, calls=call.attempts)
    return out


def rule_actions(means: Mapping[str, float | None], limit: int = 4) -> list[dict[str, Any]]:
    """Action items for the lowest-scoring metrics below 0.8, lowest first (the fallback when the judge fails)."""
    low = sorted((v, m) for m, v in means.items() if v is not None and v < 0.8 and m in RULES)
    return [{"priority": i, "metric": m, "action": RULES[m], "source": "rules"} for i, (_, m) in enumerate(low[:limit], 1)]


def _insights_parse(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ParseError("expected a JSON object")
    insights = obj.get("insights") or []
    actions = obj.get("actions") or []
    if not isinstance(insights, list) or not isinstance(actions, list) or not (insights or actions):
        raise ParseError("expected insights and actions lists")
    clean: list[dict[str, Any]] = []
    for i, a in enumerate(actions[:4], 1):
        if isinstance(a, dict):
            text = field_text(a, ["action", "item"])
            prio = a.get("priority", i)
            clean.append(
                {
                    "priority": int(prio) if isinstance(prio, (int, float)) else i,
                    "metric": field_text(a, ["metric"]),
                    "action": text,
                    "source": "judge",
                }
            )
        elif isinstance(a, str):
            clean.append({"priority": i, "metric": "", "action": a, "source": "judge"})
    clean.sort(key=lambda a: a["priority"])
    return {"insights": [str(s) for s in insights[:3]], "actions": clean}


def insights(judge: Judge | None, strategy: str, means: Mapping[str, float | None], n: int, low_explanations: Sequence[str]) -> dict[str, Any]:
    """Dataset-level insights and up to four prioritised action items for one strategy."""
    if judge is None:
        return {"insights": [], "actions": rule_actions(means), "source": "rules", "error": "no judge"}
    prompt = INSIGHTS_PROMPT.format(
        strategy=strategy,
        n=n,
        means=json.dumps({m: (round(v, 3) if v is not None else None) for m, v in means.items()}),
        explanations="\n".join(f"- {e}" for e in low_explanations[:8]) or "- (none)",
    )
    call = judge.ask(prompt, _insights_parse, max_tokens=400)
    if call.kind:
        return {
            "insights": [],
            "actions": rule_actions(means),
            "source": "rules",
            "error": call.error,
            "kind": call.kind,
            "calls": call.attempts,
            "judge": judge.name,
        }
    return {**call.value, "source": "judge", "calls": call.attempts, "judge": judge.name}
