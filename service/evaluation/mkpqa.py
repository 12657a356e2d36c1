"""The MKP-QA paper's judged response-quality metrics: relevancy (Figure 7) and faithfulness (Figure 8).

The paper's appendix prompts (Figures 7 and 8) could not be retrieved verbatim here; the prompts
below follow their described design (a 1-10 relevancy rating of the answer to the question; RAGAS-style
faithfulness: split the answer into statements, then judge each statement against the context) in our
own words. A reply that cannot be parsed is retried and then counted as a failure
(:class:`~service.evaluation.judges.Judge`), never scored as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.evaluation.judges import Judge, Outcome, ParseError, field_number, field_text, format_context

# --------------------------------------------------------------------------- MKP-QA: relevancy (Figure 7)
RELEVANCY_PROMPT = (
    "You are an impartial judge of a question-answering assistant for product documentation.\n"
    "Rate how relevant the assistant's response is to the user's question on a scale from 1 to 10:\n"
    "1 = the response is unrelated to the question; 4 = it touches the topic but does not answer;\n"
    "7 = it answers the question with gaps or extra material; 10 = it directly and completely answers it.\n"
    "Judge relevance to the question only, not style.\n\n"
    "Question: {question}\n\n"
    "Response: {answer}\n\n"
    'Reply with JSON only: {{"score": <integer 1-10>, "reason": "<one sentence>"}}\n'
)


def _relevancy_parse(obj: Any) -> tuple[float, str]:
    return field_number(obj, ["score", "rating", "relevancy"], 1, 10), field_text(obj, ["reason", "explanation"])


def relevancy(judge: Judge, question: str, answer: str | None) -> Outcome:
    """MKP-QA relevancy: the judge's 1-10 rating of the answer to the question."""
    if not answer:
        return Outcome.skipped("no answer to judge")
    call = judge.ask(RELEVANCY_PROMPT.format(question=question.strip(), answer=answer.strip()), _relevancy_parse, max_tokens=96)
    if call.kind:
        return Outcome.failed(call)
    score, reason = call.value
    return Outcome(score, explanation=reason, calls=call.attempts)


# --------------------------------------------------------------------------- MKP-QA: faithfulness (Figure 8)
STATEMENTS_PROMPT = (
    "Break the answer below into short, standalone factual statements. Each statement must be understandable "
    "without the others (replace pronouns by what they refer to). Leave out greetings and citation markers.\n\n"
    "Question: {question}\n\n"
    "Answer: {answer}\n\n"
    'Reply with JSON only: {{"statements": ["<statement>", ...]}}\n'
)

VERDICTS_PROMPT = (
    "Your task is to judge the faithfulness of statements to a context. For each statement, give verdict 1 if "
    "the statement can be directly inferred from the context, and 0 if it cannot (it is not stated, or it "
    "contradicts the context). Use only the context, not your own knowledge.\n\n"
    "Context:\n{context}\n\n"
    "Statements:\n{statements}\n\n"
    "Reply with JSON only, one entry per statement in the same order: "
    '{{"verdicts": [{{"statement": <number>, "verdict": <0 or 1>, "reason": "<short>"}}, ...]}}\n'
)


def _statements_parse(obj: Any) -> list[str]:
    items = obj.get("statements") if isinstance(obj, dict) else obj
    if not isinstance(items, list):
        raise ParseError("expected a list of statements")
    out = [str(s).strip() for s in items if isinstance(s, (str, int, float)) and str(s).strip()]
    if len(out) != len(items):
        raise ParseError("statements must be strings")
    return out


def parse_verdicts(obj: Any, n: int) -> list[tuple[int, str]]:
    """``n`` (verdict, reason) pairs from a verdicts reply; ParseError unless there is exactly one per statement."""
    items = obj.get("verdicts") if isinstance(obj, dict) else obj
    if not isinstance(items, list) or len(items) != n:
        raise ParseError(f"expected {n} verdicts, got {len(items) if isinstance(items, list) else 'none'}")
    out = []
    for item in items:
        if isinstance(item, dict):
            v = field_number(item, ["verdict", "score"], 0, 1)
            reason = field_text(item, ["reason", "explanation"])
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            v, reason = float(item), ""
        else:
            raise ParseError(f"bad verdict {item!r}")
        if v not in (0.0, 1.0):
            raise ParseError(f"verdict must be 0 or 1, got {v}")
        out.append((int(v), reason))
    return out


def faithfulness_score(verdicts: Sequence[int]) -> float | None:
    """Share of the answer's statements that the context supports (None for an answer without statements)."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def faithfulness(judge: Judge, question: str, answer: str | None, context: Sequence[tuple[str, str]]) -> Outcome:
    """RAGAS-style faithfulness: statements of the answer, each judged against the context; supported / total."""
    if not answer:
        return Outcome.skipped("no answer to judge")
    call = judge.ask(STATEMENTS_PROMPT.format(question=question.strip(), answer=answer.strip()), _statements_parse)
    calls = call.attempts
    if call.kind:
        return Outcome.failed(call, calls)
    statements: list[str] = call.value
    if not statements:
        return Outcome(None, error="the judge found no statement in the answer", kind="parse", calls=calls)
    listing = "\n".join(f"{i}. {s}" for i, s in enumerate(statements, 1))
    call = judge.ask(
        VERDICTS_PROMPT.format(context=format_context(context), statements=listing),
        lambda obj: parse_verdicts(obj, len(statements)),
    )
    calls += call.attempts
    if call.kind:
        return Outcome.failed(call, calls)
    verdicts = [v for v, _ in call.value]
    unsupported = [s for s, (v, _) in zip(statements, call.value, strict=True) if not v]
    explanation = f"{sum(verdicts)} of {len(verdicts)} statements supported by the context" + (
        f"; unsupported: {'; '.join(unsupported[:3])}" if unsupported else ""
    )
    return Outcome(faithfulness_score(verdicts), explanation=explanation, calls=calls, detail={"statements": statements, "verdicts": verdicts})
