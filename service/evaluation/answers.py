"""Answer quality without a judge: the ``answers`` metric group.

Per question, from the answer the configured answering path gives (what /ask would return):

- ``answer_f1`` (SQuAD token F1; citation markers [n] are removed first, in every metric),
  ``answer_rouge_l`` (ROUGE-L F-measure, rouge-score with stemming) and
  ``answer_bleu`` (sacrebleu sentence BLEU, 0-1) against the reference answer. A missing answer and a
  "not covered" answer to an in-scope question score 0: they are failures of the system, not of the metric.
- ``false_refusal``: 1 when an in-scope question is answered ``not_covered``.
- ``abstained``: 1 when an out-of-scope question (``kind: "oos"``, or no domains and no gold passages)
  is answered ``not_covered``; out-of-scope questions get no lexical scores (their reference answers come
  from documentation that is not indexed).
- ``answer_ms``: time from the ranking to the answer.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from service.evaluation.record import QuestionRecord
from service.evaluation.wixqa import bleu, token_f1
from service.schemas import EvalQuery

_CITATION = re.compile(r"\s*\[\d{1,2}\]")
METRICS = ("answer_f1", "answer_rouge_l", "answer_bleu", "false_refusal", "abstained", "answer_ms")
LEXICAL = ("answer_f1", "answer_rouge_l", "answer_bleu")
NOT_COVERED = "not_covered"


@lru_cache(maxsize=1)
def _rouge_l():  # noqa: ANN202
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (longest common subsequence), 0-1."""
    return float(_rouge_l().score(reference, prediction)["rougeL"].fmeasure)


def is_out_of_scope(q: EvalQuery) -> bool:
    """A question the indexed documentation does not answer (labelled ``oos``, or with neither a domain nor a gold passage)."""
    return q.kind == "oos" or (not q.domains and not q.gold_doc_ids)


def scores(text: str | None, mode: str, reference: str | None, *, out_of_scope: bool, answer_ms: float | None) -> dict[str, float | None]:
    """The ``answers`` metrics of one answer (see the module docstring)."""
    refused = mode == NOT_COVERED
    out: dict[str, float | None] = {m: None for m in METRICS}
    out["answer_ms"] = answer_ms
    if out_of_scope:
        out["abstained"] = float(refused)
        return out
    out["false_refusal"] = float(refused)
    if not reference:
        return out
    if not text or refused:
        out.update({m: 0.0 for m in LEXICAL})
        return out
    text = _CITATION.sub(" ", text)
    out.update(answer_f1=token_f1(text, reference), answer_rouge_l=rouge_l(text, reference), answer_bleu=bleu(text, reference))
    return out


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    p50, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    return {"p50": round(float(p50), 3), "p95": round(float(p95), 3)}


def _means(records: Sequence[QuestionRecord]) -> dict[str, Any]:
    out: dict[str, Any] = {"questions": len(records)}
    for m in METRICS[:-1]:
        vals = [v for r in records if (v := r.metrics.get(m)) is not None]
        out[m] = round(float(np.mean(vals)), 6) if vals else None
        out[f"n_{m}"] = len(vals)
    ms = [v for r in records if (v := r.metrics.get("answer_ms")) is not None]
    out["answer_ms"] = _percentiles(ms)
    return out


def summarize_answers(strategies: Sequence[str], records: Sequence[QuestionRecord]) -> dict[str, Any]:
    """Per strategy: the answers metrics over all questions (``abstention_rate`` on out-of-scope ones,
    ``false_refusal_rate`` on in-scope ones, latency p50/p95) and the same per answer mode."""
    out: dict[str, Any] = {}
    for s in strategies:
        rs = [r for r in records if r.strategy == s and "answer_ms" in r.metrics]
        by_mode: dict[str, list[QuestionRecord]] = defaultdict(list)
        for r in rs:
            by_mode[str(r.answer_mode or "none")].append(r)
        overall = _means(rs)
        overall["abstention_rate"] = overall.pop("abstained")
        overall["false_refusal_rate"] = overall.pop("false_refusal")
        out[s] = {"all": overall, "by_answer_mode": {m: _means(v) for m, v in sorted(by_mode.items())}}
    return out
