"""Retrieval metrics: Acc@Top1, Recall@k, MRR, domain routing, and RAGEval's EIR; the one implementation that
evaluation (:mod:`.groups`), training (the retriever's and the index's reports) and ``benchmarks/quality.py`` use.

Every per-question function takes the final ranking as doc_ids (best first) and the question's gold passages.
A question without gold passages has no retrieval score: the functions return None and the
aggregates count it as skipped, never as 0.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import numpy as np

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


def ranking_scores(
    ranked: Sequence[str], gold: Collection[str], searched: Collection[str], gold_domains: Collection[str], top_k: int
) -> dict[str, float | None]:
    """The retrieval metrics of one question's ranking (``searched``: the domains the strategy searched), by the
    names evaluation reports them under: ``acc_at_top1``, ``recall_at_<top_k>``, ``mrr``, ``routing_accuracy``,
    ``routing_exact``, ``domains_searched``."""
    return {
        "acc_at_top1": acc_at_top1(ranked, gold),
        f"recall_at_{top_k}": recall_at_k(ranked, gold, top_k),
        "mrr": mrr(ranked, gold),
        "routing_accuracy": routing_accuracy(searched, gold_domains),
        "routing_exact": routing_exact(searched, gold_domains),
        "domains_searched": float(len(searched)),
    }


def ranking_means(rankings: Sequence[Sequence[str]], golds: Sequence[Collection[str]], ks: Sequence[int] = (5, 10)) -> dict[str, float | int]:
    """Acc@1, Recall@k and MRR averaged over the questions with gold passages (rounded to 4 digits; NaN when none
    has any): ``{"queries", "acc@1", "recall@<k>"..., "mrr"}``, as the retriever's and the index's reports store them."""
    scored = [(list(ranked), gold) for ranked, gold in zip(rankings, golds, strict=True) if gold]

    def mean(values: list[float | None]) -> float:
        xs = [v for v in values if v is not None]
        return round(float(np.mean(xs)), 4) if xs else float("nan")

    out: dict[str, float | int] = {"queries": len(scored), "acc@1": mean([acc_at_top1(r, g) for r, g in scored])}
    for k in ks:
        out[f"recall@{k}"] = mean([recall_at_k(r, g, k) for r, g in scored])
    out["mrr"] = mean([mrr(r, g) for r, g in scored])
    return out
