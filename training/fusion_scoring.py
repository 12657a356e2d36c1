"""Acc@Top1 and MRR of the fused strategy's ranking, for many questions at once (the fit of training/fusion.py).

A question's candidates are its domains' hits, U = w_j * s+ (s+ = max(s, 0)), ranked by (-U, tie) with ``tie`` the
rank by (-s, point id) (merge's tie-break); a domain with a non-finite weight (the gate's -inf) is dropped. The
weights w_j >= 0 are one row per question of a (questions, domains) matrix. Within one domain a higher s never gets
a lower U, and its tie rank is lower, so the domain's hits keep their tie order in the ranking: only each domain's
first ``top_k`` hits can reach the top ``top_k`` (:class:`Candidates`, padded arrays), and only its first hit the
top 1 (:class:`Leaders`, one per question and domain). This holds for weights >= 0 (or not finite: dropped) and
similarities that are not NaN (:func:`candidates` refuses those); U is the same product as there, so the scores are
exactly those of training.fusion's per-question ``_scores``, ties included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

_LAST = np.iinfo(np.int64).max  # the tie rank of a padding slot: after every hit


@dataclass
class Prepared:
    """A question's candidates as arrays (the evidence does not depend on the grid's parameters)."""

    dom: np.ndarray  # domain index of each candidate hit
    s: np.ndarray  # its similarity
    tie: np.ndarray  # its rank by (-s, point id): merge's tie-break
    gold: np.ndarray  # whether it is a gold passage


@dataclass(frozen=True)
class Leaders:
    """Each (question, domain)'s first hit by tie rank: its s+, tie rank, gold flag; ``valid``: the domain has one."""

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
    s: np.ndarray  # (n, k) float: s+
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
    order = order[np.isfinite(np.maximum(c.s[order], 0.0))]
    dom = c.dom[order]
    by_dom = np.argsort(dom, kind="stable")
    nth = np.empty(len(order), dtype=np.int64)  # place of each hit within its domain
    nth[by_dom] = np.arange(len(order)) - np.searchsorted(dom[by_dom], dom[by_dom], side="left")
    return order[nth < top_k]


def candidates(prepared: Sequence[Prepared], m: int, top_k: int) -> Candidates:
    """The padded arrays of ``prepared`` (questions over ``m`` domains) for rankings cut at ``top_k`` (>= 1)."""
    heads = [_head(c, top_k) for c in prepared]
    n, k = len(prepared), max([1, *(len(h) for h in heads)])
    dom, tie = np.zeros((n, k), dtype=np.int64), np.full((n, k), _LAST, dtype=np.int64)
    s, gold, valid = np.zeros((n, k)), np.zeros((n, k), dtype=bool), np.zeros((n, k), dtype=bool)
    lead = Leaders(np.zeros((n, m)), np.full((n, m), _LAST, dtype=np.int64), np.zeros((n, m), dtype=bool), np.zeros((n, m), dtype=bool))
    for i, (c, h) in enumerate(zip(prepared, heads, strict=True)):
        dom[i, : len(h)], s[i, : len(h)], tie[i, : len(h)] = c.dom[h], np.maximum(c.s[h], 0.0), c.tie[h]
        gold[i, : len(h)], valid[i, : len(h)] = c.gold[h], True
        doms, at = np.unique(c.dom[h], return_index=True)  # each domain's first hit (h is in tie order)
        lead.s[i, doms], lead.tie[i, doms], lead.gold[i, doms], lead.valid[i, doms] = np.maximum(c.s[h[at]], 0.0), c.tie[h[at]], c.gold[h[at]], True
    return Candidates(dom, s, tie, gold, valid, lead, top_k)


def _u(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """U = w * s+ (NaN for a dropped domain's hit of s+ 0, dropped as every non-finite U is)."""
    with np.errstate(invalid="ignore"):
        return w * s


def rank_scores(w: np.ndarray, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """Per question: Acc@Top1 and MRR within top_k of the ranking under weights ``w`` (questions, domains)."""
    u = _u(np.take(w, cand.at), cand.s)
    keep = cand.valid & np.isfinite(u)
    gold = keep & cand.gold
    ug = np.where(gold, u, -np.inf)
    best = ug.max(axis=1, keepdims=True)  # the first gold passage: the highest U, then the lowest tie rank
    tie = np.where(gold & (ug == best), cand.tie, _LAST).min(axis=1, keepdims=True)
    ahead = (keep & ((u > best) | ((u == best) & (cand.tie < tie)))).sum(axis=1)
    found = gold.any(axis=1)
    return np.where(found & (ahead == 0), 1.0, 0.0), np.where(found & (ahead < cand.top_k), 1.0 / (ahead + 1), 0.0)


def mean_scores(acc: np.ndarray, mrr: np.ndarray) -> tuple[float, float]:
    """(mean Acc@Top1, mean MRR), summed as the per-question (n, 2) array of the reference scorer is."""
    sc = np.stack([acc, mrr], axis=1).mean(axis=0)
    return float(sc[0]), float(sc[1])


def _first(u: np.ndarray, keep: np.ndarray, tie: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per question, the column of the best kept (U, -tie), and whether any is kept (else the column is 0)."""
    u = np.where(keep, u, -np.inf)
    found = np.asarray(keep.any(axis=1))
    return np.where(keep & (u == u.max(axis=1, keepdims=True)), tie, _LAST).argmin(axis=1), found


def top1_accuracy(w: np.ndarray, lead: Leaders) -> float:
    """Mean Acc@Top1 under weights ``w``: the top passage is the best (U, -tie) of the domains' first hits."""
    u = _u(w, lead.s)
    first, found = _first(u, lead.valid & np.isfinite(u), lead.tie)
    return int((found & lead.gold[np.arange(len(u)), first]).sum()) / len(u)


class ColumnSearch:
    """Acc@Top1 as one domain's weight changes and the others stay: with each question's best and second best
    first hits, the best of the other domains' is known, and each trial weight costs one comparison per question."""

    def __init__(self, w: np.ndarray, lead: Leaders) -> None:
        self.lead = lead
        self.u = _u(w, lead.s)
        self.keep = lead.valid & np.isfinite(self.u)
        self._rank()

    def _rank(self) -> None:
        rows = np.arange(len(self.u))
        self.first, self.has_first = _first(self.u, self.keep, self.lead.tie)
        keep = self.keep.copy()
        keep[rows, self.first] = False
        self.second, self.has_second = _first(self.u, keep, self.lead.tie)

    def set(self, j: int, w_j: np.ndarray) -> None:
        """Domain j's weight column is now ``w_j``."""
        self.u[:, j] = _u(w_j, self.lead.s[:, j])
        self.keep[:, j] = self.lead.valid[:, j] & np.isfinite(self.u[:, j])
        self._rank()

    def accuracies(self, j: int, w_j: np.ndarray) -> list[float]:
        """Mean Acc@Top1 for each column of ``w_j`` (questions, trials) as domain j's weights, the others as set."""
        rows, moved = np.arange(len(self.u)), self.first == j
        other = np.where(moved, self.second, self.first)  # the best first hit of the other domains
        found = np.where(moved, self.has_second, self.has_first)[:, None]
        best, tie = self.u[rows, other][:, None], self.lead.tie[rows, other][:, None]
        u = _u(w_j, self.lead.s[:, j, None])
        keep = self.lead.valid[:, j, None] & np.isfinite(u)
        wins = keep & (~found | (u > best) | ((u == best) & (self.lead.tie[:, j, None] < tie)))
        right = np.where(wins, self.lead.gold[:, j, None], found & self.lead.gold[rows, other][:, None]).sum(axis=0)
        return [int(k) / len(u) for k in right]
