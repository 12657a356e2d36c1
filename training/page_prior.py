"""The page prior's fit (``fedqa train router``): which pages answered the labelled questions, and how much that counts.

Every labelled question with gold passages the router version knows (its training and its validation questions)
counts once for every page (a passage's ``source``) its gold passages are on. On the held-out questions (the ones
calibration and fusion are fitted on), each question is ranked as the default strategy serves it
(:func:`service.retrieval.strategies.select` with the fitted fusion parameters, then
:func:`service.retrieval.federated.merge` with the bonus) for every weight and depth of the grid, with every counted
question that shares a gold passage with it left out (itself, and a joined question and its parts), so it is scored
as a question nobody counted. The setting with the best Acc@Top1 is kept (ties: the smaller weight, then depth) when a
5-fold cross-fit of that choice wins more held-out questions from weight 0 than it loses by a one-sided sign test at
95% (wins - losses > z sqrt(wins + losses), the convention of the fused strategy's guard); otherwise weight 0 (the
ranking without it) is stored, with the report saying why. The grid is a range searched, not a fitted value.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.federated import merge
from service.retrieval.page_prior import PagePrior
from service.retrieval.passage import Hit, Passage, point_id
from service.retrieval.strategies import DEFAULT_STRATEGY, select
from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from training.fusion import FitQuestion

WEIGHT_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)
DEPTH_GRID = (10, 20, 30)
#: z of the one-sided sign test the cross-fit must pass (95%, as the fused strategy's guard).
PRIOR_Z = 1.645
FOLDS = 5


def counted(passages: Iterable[Passage], answered: Sequence[LabelledQuery]) -> PagePrior:
    """A prior of weight 0 counting ``answered`` (questions with gold passages) on the pages of ``passages``."""
    page_by_doc: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for p in passages:
        page_by_doc[p.doc_id] = p.source
        members.setdefault(p.source, []).append(p.doc_id)
    answers = {q.qid: [d for d in q.gold_doc_ids if d in page_by_doc] for q in answered}
    answers = {q: ids for q, ids in answers.items() if ids}
    used = {page_by_doc[d] for ids in answers.values() for d in ids}
    return PagePrior(weight=0.0, depth=DEPTH_GRID[0], members={p: members[p] for p in sorted(used)}, answers=answers)


@dataclass(frozen=True)
class Pages:
    """A prior's counts arranged for scoring many settings, each question scored as if not counted."""

    prior: PagePrior
    page_of: Mapping[str, str]  # point id -> page
    doc_page: Mapping[str, str]  # doc_id -> page
    by_doc: Mapping[str, list[str]]  # doc_id -> the counted questions with it as a gold passage

    @classmethod
    def of(cls, prior: PagePrior) -> Pages:
        doc_page = prior.page_of
        by_doc: dict[str, list[str]] = {}
        for qid, ids in prior.answers.items():
            for d in ids:
                by_doc.setdefault(d, []).append(qid)
        return cls(prior, {point_id(d): p for d, p in doc_page.items()}, doc_page, by_doc)

    def bonus(self, point_ids: Iterable[str], weight: float, gold: Iterable[str] = ()) -> dict[str, float]:
        """weight * log(1 + n) of each of ``point_ids`` on a counted page, every counted question sharing a gold
        passage with ``gold`` (doc_ids) left out (:meth:`PagePrior.without`)."""
        counts = dict(self.prior.pages)
        for qid in {q for d in gold for q in self.by_doc.get(d, ())}:
            for page in {self.doc_page[d] for d in self.prior.answers[qid]}:
                counts[page] -= 1
        out = {}
        for pid in point_ids:
            n = counts.get(self.page_of.get(pid, ""), 0)
            if n > 0:
                out[pid] = weight * math.log1p(n)
        return out


@dataclass(frozen=True)
class PriorQuestion:
    """A held-out question as the default strategy searched it: each domain's hits and merge weight, its gold."""

    per_domain: dict[str, list[Hit]]
    weights: dict[str, float]
    gold: frozenset[str]  # point ids
    gold_docs: frozenset[str]  # doc_ids


def index_pages(settings: Settings, index_version: str, answered: Sequence[LabelledQuery]) -> Pages:
    """:meth:`Pages.of` the passages of every domain of the index version ``index_version``."""
    from service.retrieval.backends import open_backend

    store = open_backend(settings).open(index_version)
    try:
        return Pages.of(counted((p for d in store.domains() for p in store.iter_passages(d)), answered))
    finally:
        store.close()


def prior_questions(questions: Sequence[FitQuestion], domains: Sequence[str], fusion: FusionParams | None) -> list[PriorQuestion]:
    """The held-out questions (calibrated p in ``domains`` order, every domain's hits) as the default strategy with
    ``fusion`` selects their domains and weights."""
    fitted = RouterFitted(fusion=fusion)
    out = []
    for q in questions:
        if not q.gold or not q.domains:
            continue
        limit = max((len(h) for h in q.hits.values()), default=0)

        def search(ds: Sequence[str], k: int, hits: dict[str, list[Hit]] = q.hits) -> dict[str, list[Hit]]:
            return {d: hits.get(d, [])[:k] for d in ds}

        probs = {d: float(v) for d, v in zip(domains, q.p, strict=True)}
        sel = select(DEFAULT_STRATEGY, probs, domains, tau0=0.0, gate_mode="deterministic", search=search, top_k=limit, fitted=fitted)
        got = sel.hits or {}
        per = {d: got[d] if d in got else q.hits.get(d, []) for d in sel.weights}
        out.append(PriorQuestion(per, dict(sel.weights), frozenset(point_id(d) for d in q.gold), frozenset(q.gold)))
    return out


def top1(questions: Sequence[PriorQuestion], pages: Pages, weight: float, depth: int) -> np.ndarray:
    """0/1 per question: the top passage of its ranking with the bonus (each domain's top ``depth``) is gold."""
    out = np.zeros(len(questions))
    for i, q in enumerate(questions):
        per = {d: sorted(h, key=lambda h: -h.score)[:depth] for d, h in q.per_domain.items()}
        bonus = pages.bonus((h.point_id for hs in per.values() for h in hs), weight, q.gold_docs) if weight > 0 else None
        first = merge(per, q.weights, 1, bonus)
        out[i] = float(bool(first) and first[0].point_id in q.gold)
    return out


def _best(scores: Mapping[tuple[float, int], np.ndarray], rows: Sequence[int]) -> tuple[float, int]:
    """The setting with the best mean over ``rows`` (ties: the smaller weight, then depth)."""
    return max(sorted(scores), key=lambda s: (float(scores[s][list(rows)].mean()), -s[0], -s[1]))


def fit_page_prior(questions: Sequence[PriorQuestion], pages: Pages, *, seed: int = 0) -> tuple[PagePrior, dict[str, Any]]:
    """``pages``' prior with the fitted weight and depth (see the module docstring); and a report."""
    base_report = {"questions": len(questions), "pages": len(pages.prior.pages), "passages": sum(len(v) for v in pages.prior.members.values())}
    if not questions or not pages.prior.pages:
        return replace(pages.prior, weight=0.0), {"chosen": "none", "reason": "no held-out question or no counted page", **base_report}
    settings = [(w, d) for w in WEIGHT_GRID for d in DEPTH_GRID if w > 0] + [(0.0, DEPTH_GRID[0])]
    scores = {s: top1(questions, pages, *s) for s in settings}
    base = scores[(0.0, DEPTH_GRID[0])]
    everyone = list(range(len(questions)))
    best = _best(scores, everyone)
    order = everyone.copy()
    random.Random(seed).shuffle(order)
    held = np.zeros(len(questions))
    for k in range(FOLDS):
        fold = sorted(order[k::FOLDS])
        rest = sorted(set(everyone) - set(fold))
        if fold and rest:
            held[fold] = scores[_best(scores, rest)][fold]
    wins, losses = int(((held > 0) & (base == 0)).sum()), int(((held == 0) & (base > 0)).sum())
    pays = wins - losses > PRIOR_Z * math.sqrt(wins + losses)
    weight, depth = best if pays else (0.0, best[1])
    report = {
        "chosen": "page prior" if pays and weight > 0 else "none",
        "weight": weight,
        "depth": depth,
        **base_report,
        "counted_questions": len(pages.prior.answers),
        "acc_at_top1": round(float(scores[(weight, depth)].mean()), 4),
        "acc_at_top1_without": round(float(base.mean()), 4),
        "crossfit": {"folds": FOLDS, "acc_at_top1": round(float(held.mean()), 4), "wins": wins, "losses": losses, "pays": pays, "z": PRIOR_Z},
        "grid": {"weight": list(WEIGHT_GRID), "depth": list(DEPTH_GRID)},
    }
    return replace(pages.prior, weight=weight, depth=depth), report
