"""RAGEval's metrics.

Generation: key points are extracted once per question from the reference answer (an LLM call), then
the judge labels each key point against the answer: ``covered`` (the answer states it correctly),
``contradicted`` (the answer states something that conflicts with it) or ``missing``. Then
completeness = covered / key points, hallucination = contradicted / key points and
irrelevance = missing / key points (the three sum to 1).

Retrieval: recall = share of the gold passages among the retrieved ones, and EIR (effective
information rate) = words of the retrieved gold passages / words of all retrieved passages
(:func:`service.evaluation.retrieval_metrics.effective_information_rate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.evaluation.judges import Judge, Outcome, ParseError, field_text

LABELS = ("covered", "contradicted", "missing")

KEYPOINTS_PROMPT = (
    "Extract the key points of the reference answer below: the distinct facts or steps a correct answer to the "
    "question must contain. Give between 1 and 6 short key points, each a standalone sentence.\n\n"
    "Question: {question}\n\n"
    "Reference answer: {reference}\n\n"
    'Reply with JSON only: {{"key_points": ["<key point>", ...]}}\n'
)

KEYPOINT_JUDGE_PROMPT = (
    "Compare an assistant's answer with the numbered key points of the correct answer. For each key point say "
    'whether the answer "covered" it (states it correctly), "contradicted" it (states something that conflicts '
    'with it) or left it "missing" (does not address it).\n\n'
    "Question: {question}\n\n"
    "Key points:\n{points}\n\n"
    "Assistant's answer: {answer}\n\n"
    "Reply with JSON only, one entry per key point in order: "
    '{{"labels": [{{"key_point": <number>, "label": "covered" | "contradicted" | "missing"}}, ...]}}\n'
)


def keypoint_scores(labels: Sequence[str]) -> dict[str, float | None]:
    """completeness, hallucination and irrelevance from one label per key point."""
    n = len(labels)
    if n == 0:
        return {"completeness": None, "hallucination": None, "irrelevance": None}
    bad = [lab for lab in labels if lab not in LABELS]
    if bad:
        raise ValueError(f"unknown labels {bad}")
    return {
        "completeness": labels.count("covered") / n,
        "hallucination": labels.count("contradicted") / n,
        "irrelevance": labels.count("missing") / n,
    }


def _keypoints_parse(obj: Any) -> list[str]:
    items = obj.get("key_points", obj.get("keypoints")) if isinstance(obj, dict) else obj
    if not isinstance(items, list) or not items:
        raise ParseError("expected a non-empty list of key points")
    out = [str(s).strip() for s in items if isinstance(s, str) and s.strip()]
    if len(out) != len(items):
        raise ParseError("key points must be strings")
    return out[:8]


def extract_keypoints(judge: Judge, question: str, reference: str | None) -> Outcome:
    """Key points of the reference answer (``detail["key_points"]``); value is their number."""
    if not reference:
        return Outcome.skipped("no reference answer")
    call = judge.ask(KEYPOINTS_PROMPT.format(question=question, reference=reference), _keypoints_parse)
    if call.kind:
        return Outcome.failed(call)
    return Outcome(float(len(call.value)), calls=call.attempts, detail={"key_points": call.value})


def _labels_parse(obj: Any, n: int) -> list[str]:
    items = obj.get("labels") if isinstance(obj, dict) else obj
    if not isinstance(items, list) or len(items) != n:
        raise ParseError(f"expected {n} labels, got {len(items) if isinstance(items, list) else 'none'}")
    out = []
    for item in items:
        lab = (field_text(item, ["label", "verdict"]) if isinstance(item, dict) else str(item)).strip().lower()
        if lab not in LABELS:
            raise ParseError(f"unknown label {lab!r}")
        out.append(lab)
    return out


def judge_keypoints(judge: Judge, question: str, answer: str | None, key_points: Sequence[str]) -> tuple[dict[str, Outcome], int]:
    """completeness, hallucination and irrelevance of an answer against key points (one judge request)."""
    names = ("completeness", "hallucination", "irrelevance")
    if not answer:
        return {n: Outcome.skipped("no answer to judge") for n in names}, 0
    if not key_points:
        return {n: Outcome.skipped("no key points") for n in names}, 0
    points = "\n".join(f"{i}. {p}" for i, p in enumerate(key_points, 1))
    call = judge.ask(KEYPOINT_JUDGE_PROMPT.format(question=question, points=points, answer=answer), lambda obj: _labels_parse(obj, len(key_points)))
    if call.kind:
        failed = Outcome.failed(call)
        return {n: Outcome(None, error=failed.error, kind=failed.kind, detail=failed.detail) for n in names}, call.attempts
    scores = keypoint_scores(call.value)
    missing = [p for p, lab in zip(key_points, call.value, strict=True) if lab != "covered"]
    expl = f"labels: {', '.join(call.value)}" + (f"; not covered: {'; '.join(missing[:3])}" if missing else "")
    return {n: Outcome(scores[n], explanation=expl) for n in names}, call.attempts
