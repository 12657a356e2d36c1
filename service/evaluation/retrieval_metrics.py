"""Retrieval metrics of one question: Acc@Top1, Recall@k, MRR, domain routing, and RAGEval's EIR.

Every function takes the final ranking as doc_ids (best first) and the question's gold passages.
A question without gold passages has no retrieval score: the functions return None and the
aggregate counts it as skipped, never as 0.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

_WORD = re.compile(r"\w+")


def acc_at_top1(ranked: Sequence[str], gold: Collection[str]) -> float | None:
    """1 when the first passage of the ranking is one of the gold passages (any of a multi-passage gold set)."""
    if not gold:
        return None
    return 1.0 if ranked and ranked[0] in set(gold) else 0.0


def recall_at_k(ranked: Sequence[str], gold: Collection[str], k: int) -> float | None:
    """Share of the gold passages found in the first ``k`` of the ranking."""
    gold = set(gold)
    if not gold:
        return None
    return len(gold & set(ranked[:k])) / len(gold)


def mrr(ranked: Sequence[str], gold: Collection[str]) -> float | None:
    """Reciprocal rank of the first gold passage in the ranking (0 when none is retrieved)."""
    gold = set(gold)
    if not gold:
        return None
    for i, doc_id in enumerate(ranked, 1):
        if doc_id in gold:
            return 1.0 / i
    return 0.0


def routing_accuracy(searched: Collection[str], gold_domains: Collection[str]) -> float | None:
    """1 when every domain the question belongs to was searched (its answer could be found)."""
    if not gold_domains:
        return None
    return 1.0 if set(gold_domains) <= set(searched) else 0.0


def routing_exact(searched: Collection[str], gold_domains: Collection[str]) -> float | None:
    """1 when exactly the question's domains were searched (no domain missed, none extra)."""
    if not gold_domains:
        return None
    return 1.0 if set(gold_domains) == set(searched) else 0.0


def words(text: str) -> int:
    """Number of words in ``text``."""
    return len(_WORD.findall(text))


def effective_information_rate(passages: Sequence[tuple[str, str]], gold: Collection[str]) -> float | None:
    """RAGEval's EIR with gold passages as the references: words of the retrieved passages that are gold
    passages over the words of all retrieved passages. ``passages`` are (doc_id, text), best first."""
    gold = set(gold)
    if not gold:
        return None
    total = sum(words(t) for _, t in passages)
    if total == 0:
        return 0.0
    return sum(words(t) for d, t in passages if d in gold) / total
