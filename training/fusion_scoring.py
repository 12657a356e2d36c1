"""Acc@Top1 and MRR of the fused strategy's ranking, for many questions at once (the fit of training/fusion.py).

A question's candidates are its domains' hits, scored and ordered by :mod:`service.retrieval.unified` as the merge
serves them: U = w_j * s+, ranked by (-U, tie) with ``tie`` the rank by (-s, point id, domain); a domain with a
non-finite weight (the gate's -inf) is dropped. The weights w_j >= 0 are one row per question of a (questions,
domains) matrix. Within one domain a higher s never gets a lower U, and its tie rank is lower, so the domain's hits keep
their tie order in the ranking: only each domain's first ``top_k`` hits can reach the top ``top_k`` (:class:`Candidates`,
padded arrays), and only its first hit the top 1 (:class:`Leaders`, one per question and domain). This holds for
weights >= 0 (or not finite: dropped) and similarities that are not NaN (:func:`candidates` refuses those); with
negative weights every hit is a candidate (``depth``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from service.retrieval.unified import ahead, first, positive, unified_scores

_LAST = np.iinfo(np.int64).max  # the tie rank of a padding slot: after every hit


@dataclass
class Prepared:
    """A question's candidates as arrays (the evidence does not depend on the grid's parameters)."""

    dom: np.ndarray  # domain index of each candidate hit
    s: np.ndarray  # its similarity
    tie: np.ndarray  # its rank by (-s, point id, domain): merge's tie-break (:func:`service.retrieval.unified.tie_ranks`)
    gold: np.ndarray  # whether it is a gold passage


@dataclass(frozen=True)
class Leaders:
    """Each (question, domain)'s first hit by tie rank: its s, tie rank, gold flag; ``valid``: the domain has one."""

    s: np.ndarray  # (n, m) float, 0 where none
    tie: np.ndarray  # (n, m) int
    gold: np.ndarray  # (n, m) bool
    valid: np.ndarray  # (n, m) bool

    def rows(self, idx: np.ndarray) -> Leaders:
        return Leaders(self.s[idx], self.tie[idx], self.gold[idx], self.valid[idx])


@dataclass(frozen=True)
class Candidates:
    """Every question's first ``top_k`` hits of each domain (in tie order), padded to one width (``valid`` False)."""

    dom: np.ndarray  # (n, k) int
    s: np.ndarray  # (n, k) float: s
    tie: np.ndarray  # (n, k) int
    gold: np.ndarray  # (n, k) bool
    valid: np.ndarray  # (n, k) bool
    lead: Leaders
    top_k: int
    at: np.ndarray = field(init=False)  # (n, k): the index of each slot's weight in the flattened (n, m) weights

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", self.dom + self.lead.s.shape[1] * np.arange(len(self.dom))[:, None])

    def rows(self, idx: np.ndarray) -> Candidates:
        return Candidates(self.dom[idx], self.s[idx], self.tie[idx], self.gold[idx], self.valid[idx], self.lead.rows(idx), self.top_k)


def _head(c: Prepared, top_k: int) -> np.ndarray:
    """Indices of the first ``top_k`` ranked hits of each domain, in tie order (hits whose s+ is not finite never rank)."""
    if np.isnan(c.s).any():
        raise ValueError("a hit's similarity is NaN")
    order = np.argsort(c.tie, kind="stable")
    order = order[np.isfinite(positive(c.s[order]))]
    dom = c.dom[order]
    by_dom = np.argsort(dom, kind="stable")
    nth = np.empty(len(order), dtype=np.int64)  # place of each hit within its domain
    nth[by_dom] = np.arange(len(order)) - np.searchsorted(dom[by_dom], dom[by_dom], side="left")
    return order[nth < top_k]


def candidates(prepared: Sequence[Prepared], m: int, top_k: int, depth: int | None = None) -> Candidates:
    """The padded arrays of ``prepared`` (questions over ``m`` domains) for rankings cut at ``top_k`` (>= 1), each
    domain's first ``depth`` hits (default ``top_k``; the rankings under weights >= 0 need no more)."""
    heads = [_head(c, depth or top_k) for c in prepared]
    n, k = len(prepared), max([1, *(len(h) for h in heads)])
    dom, tie = np.zeros((n, k), dtype=np.int64), np.full((n, k), _LAST, dtype=np.int64)
    s, gold, valid = np.zeros((n, k)), np.zeros((n, k), dtype=bool), np.zeros((n, k), dtype=bool)
    lead = Leaders(np.zeros((n, m)), np.full((n, m), _LAST, dtype=np.int64), np.zeros((n, m), dtype=bool), np.zeros((n, m), dtype=bool))
    for i, (c, h) in enumerate(zip(prepared, heads, strict=True)):
        dom[i, : len(h)], s[i, : len(h)], tie[i, : len(h)] = c.dom[h], c.s[h], c.tie[h]
        gold[i, : len(h)], valid[i, : len(h)] = c.gold[h], True
        doms, at = np.unique(c.dom[h], return_index=True)  # each domain's first hit (h is in tie order)
        lead.s[i, doms], lead.tie[i, doms], lead.gold[i, doms], lead.valid[i, doms] = c.s[h[at]], c.tie[h[at]], c.gold[h[at]], True
    return Candidates(dom, s, tie, gold, valid, lead, top_k)


def unified(w: np.ndarray, cand: Candidates) -> np.ndarray:
    """(questions, k): each candidate's U under weights ``w`` (questions, domains), as the merge scores it."""
    return unified_scores(np.take(w, cand.at), cand.s)


def rank_scores(w: np.ndarray, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """Per question: Acc@Top1 and MRR within top_k of the ranking under weights ``w`` (questions, domains)."""
    u = unified(w, cand)
    keep = cand.valid & np.isfinite(u)
    gold = keep & cand.gold
    g, found = first(u, cand.tie, gold)  # the first gold passage
    rows = np.arange(len(u))
    before = (keep & ahead(u, cand.tie, u[rows, g][:, None], cand.tie[rows, g][:, None])).sum(axis=1)
    return np.where(found & (before == 0), 1.0, 0.0), np.where(found & (before < cand.top_k), 1.0 / (before + 1), 0.0)


def mean_scores(acc: np.ndarray, mrr: np.ndarray) -> tuple[float, float]:
    """(mean Acc@Top1, mean MRR), summed as the per-question (n, 2) array of the reference scorer is."""
    sc = np.stack([acc, mrr], axis=1).mean(axis=0)
    return float(sc[0]), float(sc[1])


def top1_accuracy(w: np.ndarray, lead: Leaders) -> float:
    """Mean Acc@Top1 under weights ``w``: the top passage is the best (U, -tie) of the domains' first hits."""
    u = unified_scores(w, lead.s)
    top, found = first(u, lead.tie, lead.valid & np.isfinite(u))
    return int((found & lead.gold[np.arange(len(u)), top]).sum()) / len(u)


class ColumnSearch:
    """Acc@Top1 as one domain's weight changes and the others stay: with each question's best and second best
    first hits, the best of the other domains' is known, and each trial weight costs one comparison per question."""

    def __init__(self, w: np.ndarray, lead: Leaders) -> None:
        self.lead = lead
        self.u = unified_scores(w, lead.s)
        self.keep = lead.valid & np.isfinite(self.u)
        self._rank()

    def _rank(self) -> None:
        rows = np.arange(len(self.u))
        self.first, self.has_first = first(self.u, self.lead.tie, self.keep)
        keep = self.keep.copy()
        keep[rows, self.first] = False
        self.second, self.has_second = first(self.u, self.lead.tie, keep)

    def set(self, j: int, w_j: np.ndarray) -> None:
        """Domain j's weight column is now ``w_j``."""
        self.u[:, j] = unified_scores(w_j, self.lead.s[:, j])
        self.keep[:, j] = self.lead.valid[:, j] & np.isfinite(self.u[:, j])
        self._rank()

    def accuracies(self, j: int, w_j: np.ndarray) -> list[float]:
        """Mean Acc@Top1 for each column of ``w_j`` (questions, trials) as domain j's weights, the others as set."""
        rows, moved = np.arange(len(self.u)), self.first == j
        other = np.where(moved, self.second, self.first)  # the best first hit of the other domains
        found = np.where(moved, self.has_second, self.has_first)[:, None]
        best, tie = self.u[rows, other][:, None], self.lead.tie[rows, other][:, None]
        u = unified_scores(w_j, self.lead.s[:, j, None])
        keep = self.lead.valid[:, j, None] & np.isfinite(u)
        wins = keep & (~found | ahead(u, self.lead.tie[:, j, None], best, tie))
        right = np.where(wins, self.lead.gold[:, j, None], found & self.lead.gold[rows, other][:, None]).sum(axis=0)
        return [int(k) / len(u) for k in right]
