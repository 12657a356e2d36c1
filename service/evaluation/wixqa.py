"""WixQA's metrics: token F1, BLEU, ROUGE-1 and ROUGE-2 against the reference answer (lexical, no LLM),
and two LLM-judged ones: context recall (does the retrieved context hold the reference answer's facts)
and factuality (is the answer consistent with the reference answer).

BLEU is sacrebleu's sentence BLEU and ROUGE is Google's rouge-score (F-measure, Porter stemming),
both on a 0-1 scale.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer
    from sacrebleu.metrics import BLEU

from service.evaluation.judges import Judge, Outcome, ParseError, field_number, field_text, format_context

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_tokens(text: str) -> list[str]:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, split on whitespace."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split()


def token_f1(prediction: str, reference: str) -> float:
    """Harmonic mean of token precision and recall (bag of normalised tokens)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu(prediction: str, reference: str) -> float:
    """sacrebleu sentence BLEU (default tokenizer and smoothing), scaled to 0-1."""
    return float(_bleu().sentence_score(prediction, [reference]).score) / 100.0


@lru_cache(maxsize=1)
def _bleu() -> BLEU:
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


@lru_cache(maxsize=1)
def _rouge() -> RougeScorer:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1 and ROUGE-2 F-measures."""
    scores = _rouge().score(reference, prediction)
    return {"rouge1": float(scores["rouge1"].fmeasure), "rouge2": float(scores["rouge2"].fmeasure)}


def lexical(prediction: str | None, reference: str | None) -> dict[str, float | None]:
    """token_f1, bleu, rouge1, rouge2 of an answer against the reference: None without a reference, 0 for a
    missing answer (a failure of the system)."""
    if not reference:
        return {"token_f1": None, "bleu": None, "rouge1": None, "rouge2": None}
    if not prediction:
        return {"token_f1": 0.0, "bleu": 0.0, "rouge1": 0.0, "rouge2": 0.0}
    return {"token_f1": token_f1(prediction, reference), "bleu": bleu(prediction, reference), **rouge(prediction, reference)}


# --------------------------------------------------------------------------- LLM-judged
CONTEXT_RECALL_PROMPT = (
    "Below are a context retrieved from product documentation and the numbered sentences of a reference answer. "
    "For each sentence, give 1 if the information in it can be found in the context (it is attributable to the "
    "context), and 0 if it cannot.\n\n"
    "Context:\n{context}\n\n"
    "Reference answer sentences:\n{sentences}\n\n"
    "Reply with JSON only, one entry per sentence in order: "
    '{{"attributed": [{{"sentence": <number>, "attributed": <0 or 1>}}, ...]}}\n'
)

FACTUALITY_PROMPT = (
    "You compare an assistant's answer with the expert reference answer to the same question. Decide whether "
    "the assistant's answer is factually correct with respect to the reference: every fact it states agrees "
    "with the reference and it does not contradict it. Missing details are acceptable; wrong facts are not.\n\n"
    "Question: {question}\n\n"
    "Reference answer: {reference}\n\n"
    "Assistant's answer: {answer}\n\n"
    'Reply with JSON only: {{"factual": <1 if factually correct, 0 if not>, "reason": "<one sentence>"}}\n'
)

_SENT = re.compile(r"(?<=[.!?])\s+|\n+")


def reference_sentences(reference: str, limit: int = 12) -> list[str]:
    """Sentences of the reference answer (at most ``limit``, the first ones)."""
    return [s.strip() for s in _SENT.split(reference) if len(s.strip().split()) >= 2][:limit]


def context_recall_score(attributed: Sequence[int]) -> float | None:
    """Share of the reference answer's sentences attributable to the context."""
    return sum(attributed) / len(attributed) if attributed else None


def _attributed_parse(obj: Any, n: int) -> list[int]:
    items = obj.get("attributed") if isinstance(obj, dict) else obj
    if not isinstance(items, list) or len(items) != n:
        raise ParseError(f"expected {n} entries, got {len(items) if isinstance(items, list) else 'none'}")
    out = []
    for item in items:
        v = field_number(item, ["attributed", "verdict", "score"], 0, 1) if isinstance(item, dict) else item
        if v not in (0, 1, 0.0, 1.0) or isinstance(v, bool):
            raise ParseError(f"bad entry {item!r}")
        out.append(int(v))
    return out


def context_recall(judge: Judge, reference: str | None, context: Sequence[tuple[str, str]]) -> Outcome:
    """LLM context recall: share of the reference answer's sentences the judge attributes to the context."""
    if not reference:
        return Outcome.skipped("no reference answer")
    sentences = reference_sentences(reference)
    if not sentences:
        return Outcome.skipped("the reference answer has no sentence")
    listing = "\n".join(f"{i}. {s}" for i, s in enumerate(sentences, 1))
    call = judge.ask(
        CONTEXT_RECALL_PROMPT.format(context=format_context(context), sentences=listing), lambda obj: _attributed_parse(obj, len(sentences))
    )
    if call.kind:
        return Outcome.failed(call)
    return Outcome(
        context_recall_score(call.value),
        explanation=f"{sum(call.value)} of {len(call.value)} reference sentences found in the context",
        calls=call.attempts,
    )


def _factual_parse(obj: Any) -> tuple[float, str]:
    v = field_number(obj, ["factual", "verdict", "score"], 0, 1)
    if v not in (0.0, 1.0):
        raise ParseError(f"factual must be 0 or 1, got {v}")
    return v, field_text(obj, ["reason", "explanation"])


def factuality(judge: Judge, question: str, answer: str | None, reference: str | None) -> Outcome:
    """LLM factuality: 1 when the answer agrees with the reference answer, 0 when it states wrong facts."""
    if not answer:
        return Outcome.skipped("no answer to judge")
    if not reference:
        return Outcome.skipped("no reference answer")
    call = judge.ask(FACTUALITY_PROMPT.format(question=question, reference=reference, answer=answer), _factual_parse, max_tokens=96)
    if call.kind:
        return Outcome.failed(call)
    value, reason = call.value
    return Outcome(value, explanation=reason, calls=call.attempts)
