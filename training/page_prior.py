"""The page prior's fit (``fedqa train router``): which pages answered the labelled questions, and how much that counts.

Every labelled question with gold passages the router version knows (its training and its validation questions)
counts once for every page (a passage's ``source``) its gold passages are on. On the held-out questions (the ones
calibration and fusion are fitted on), each question is ranked as the default strategy serves it
(:func:`service.retrieval.strategies.select` with the fitted fusion parameters, then
:func:`service.retrieval.federated.merge` with the bonus) for every weight and depth of the grid, with every counted
question that shares a gold passage with it left out (itself, and a joined question and its parts), so it is scored
as a question nobody counted. The known answers' demotion (penalty and match, with the counted questions' query
vectors) is searched with them, each held-out question's vector against the counted questions' vectors (those sharing
its gold passages left out). The setting with the best Acc@Top1 is kept (ties: the smaller weight, depth, penalty,
match) when a 5-fold cross-fit of that choice wins more held-out questions from the ranking without any bonus than it
loses by a one-sided sign test at 95% (wins - losses > z sqrt(wins + losses), the convention of the fused strategy's
guard); otherwise weight and penalty 0 (the ranking without it) are stored, with the report saying why. The grids are
ranges searched, not fitted values.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.page_prior import PagePrior, prior_bonus
from service.retrieval.passage import Hit, Passage, point_id
from service.retrieval.store import Store
from service.retrieval.strategies import DEFAULT_STRATEGY, select
from service.retrieval.unified import demotion, first, page_bonus, positive_similarity, ranking, tie_ranks, unified_scores
from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from training.fusion import FitQuestion
from training.guard import SIGN_TEST_Z, crossfit_folds, pays

WEIGHT_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)
DEPTH_GRID = (10, 20, 30)
PENALTY_GRID = (0.0, 0.1, 0.3, 1.0)
MATCH_GRID = (0.7, 0.8, 0.9, 0.95)
FOLDS = 5


@dataclass(frozen=True)
class Setting:
    """One point of the grid: the page bonus's weight and depth, the known answers' penalty and match."""

    weight: float
    depth: int
    penalty: float = 0.0
    match: float = 1.0


NONE = Setting(0.0, DEPTH_GRID[0])


@dataclass(frozen=True)
class Answered:
    """The labelled questions the prior counts (with gold passages) and their query vectors (rows; None: no vectors)."""

    questions: Sequence[LabelledQuery]
    vectors: np.ndarray | None = None


def counted(passages: Iterable[Passage], answered: Sequence[LabelledQuery], vectors: np.ndarray | None = None) -> PagePrior:
    """A prior of weight 0 counting ``answered`` (questions with gold passages) on the pages of ``passages``, with
    their query ``vectors`` (rows in ``answered``'s order) for the known answers' demotion."""
    page_by_doc: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for p in passages:
        page_by_doc[p.doc_id] = p.source
        members.setdefault(p.source, []).append(p.doc_id)
    answers = {q.qid: [d for d in q.gold_doc_ids if d in page_by_doc] for q in answered}
    answers = {q: ids for q, ids in answers.items() if ids}
    used = {page_by_doc[d] for ids in answers.values() for d in ids}
    questions = {q.qid: v for q, v in zip(answered, vectors, strict=True) if q.qid in answers} if vectors is not None else {}
    return PagePrior(weight=0.0, depth=DEPTH_GRID[0], members={p: members[p] for p in sorted(used)}, answers=answers, questions=questions)


@dataclass(frozen=True)
class Evidence:
    """One held-out question's candidates as the prior sees them, the questions sharing its gold passages left out."""

    counts: Mapping[str, float]  # point id -> log(1 + n), n the questions counted on its page
    nearest: Mapping[str, float]  # point id of a known answer -> cosine to the nearest counted question it answers

    def bonus(self, s: Setting) -> dict[str, float]:
        """What U gains (or loses) per point id at setting ``s`` (:func:`~service.retrieval.page_prior.prior_bonus`, as
        served)."""
        return dict(prior_bonus(self.counts, self.nearest, s.weight, s.penalty, s.match).total)


@dataclass(frozen=True)
class Pages:
    """A prior's counts arranged for scoring many settings, each question scored as if not counted."""

    prior: PagePrior
    answered: frozenset[str]  # doc_ids that are a counted question's gold passage

    @classmethod
    def of(cls, prior: PagePrior) -> Pages:
        answered = frozenset(d for ids in prior.answers.values() for d in ids)
        return cls(prior, answered)

    def evidence(self, point_ids: Iterable[str], gold: Iterable[str] = (), vector: np.ndarray | None = None) -> Evidence:
        """The counts (and, with the question's ``vector``, the known answers' nearest cosines) of ``point_ids``, every
        counted question sharing a gold passage with ``gold`` (doc_ids) left out (:meth:`PagePrior.without`)."""
        gold = list(gold)
        prior = self.prior.without(gold) if self.answered.intersection(gold) else self.prior
        wanted = list(point_ids)
        out = {pid: prior.counts[pid] for pid in wanted if pid in prior.counts}
        near = dict(zip(prior.known, prior.nearest(vector).tolist(), strict=True)) if vector is not None and prior.known else {}
        return Evidence(out, {pid: near[pid] for pid in wanted if pid in near})

    def bonus(self, point_ids: Iterable[str], weight: float, gold: Iterable[str] = ()) -> dict[str, float]:
        """weight * log(1 + n) of each of ``point_ids`` on a counted page, leaving out as :meth:`evidence` does."""
        return self.evidence(point_ids, gold).bonus(Setting(weight, DEPTH_GRID[0]))


@dataclass(frozen=True)
class PriorQuestion:
    """A held-out question as the default strategy searched it: each domain's hits and merge weight, its gold."""

    per_domain: dict[str, list[Hit]]  # each domain's hits, best first
    weights: dict[str, float]
    gold: frozenset[str]  # point ids
    gold_docs: frozenset[str]  # doc_ids
    vector: np.ndarray | None = None  # its query vector


@contextmanager
def unseen(pipeline, gold: Iterable[str]) -> Iterator[None]:  # noqa: ANN001 - a Pipeline
    """While the block runs, ``pipeline``'s page prior leaves out the counted questions sharing a passage of ``gold``
    (a labelled question scored as a new one: the fits made after the router, on its held-out questions)."""
    fitted, gold = pipeline.router.fitted, list(gold)
    if fitted.page_prior is None or not gold:
        yield
        return
    pipeline.router.fitted = replace(fitted, page_prior=fitted.page_prior.without(gold))
    try:
        yield
    finally:
        pipeline.router.fitted = fitted


def index_pages(settings: Settings, index_version: str, answered: Answered, *, store: Store | None = None) -> Pages:
    """:meth:`Pages.of` the passages of every domain of the index version ``index_version`` (``store``: that version,
    already open)."""
    from indexes.rebuild import index_store

    with index_store(settings, index_version, store) as st:
        return Pages.of(counted((p for d in st.domains() for p in st.iter_passages(d)), answered.questions, answered.vectors))


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
        per = {d: sorted(got[d] if d in got else q.hits.get(d, []), key=lambda h: -h.score) for d in sel.weights}
        out.append(PriorQuestion(per, dict(sel.weights), frozenset(point_id(d) for d in q.gold), frozenset(q.gold), q.vector))
    return out


@dataclass(frozen=True)
class Ranked:
    """A held-out question's candidates at one depth (each domain's top ``depth`` hits) as the merge scores them."""

    keys: list[tuple[str, str]]  # (domain, point id)
    w: np.ndarray  # its domain's merge weight
    s: np.ndarray
    counts: np.ndarray  # log(1 + n) of its page (0: not on a counted page)
    nearest: np.ndarray  # a known answer's cosine to the nearest counted question it answers (NaN: not a known answer)
    tie: np.ndarray  # the merge's tie order (:func:`~service.retrieval.unified.tie_ranks`)
    gold: np.ndarray

    @classmethod
    def of(cls, q: PriorQuestion, evidence: Evidence, depth: int) -> Ranked:
        """``q``'s candidates at ``depth`` (a point a domain returned twice counts once, at its higher s+, as in the merge)."""
        rows: dict[tuple[str, str], Hit] = {}
        for d, hits in q.per_domain.items():
            for h in hits[:depth]:
                had = rows.get((d, h.point_id))
                if had is None or positive_similarity(h.score) > positive_similarity(had.score):
                    rows[(d, h.point_id)] = h
        keys = list(rows)
        s = np.array([rows[k].score for k in keys], dtype=np.float64)
        return cls(
            keys,
            np.array([q.weights[d] for d, _ in keys], dtype=np.float64),
            s,
            np.array([evidence.counts.get(pid, 0.0) for _, pid in keys], dtype=np.float64),
            np.array([evidence.nearest.get(pid, np.nan) for _, pid in keys], dtype=np.float64),
            tie_ranks(s, [pid for _, pid in keys], [d for d, _ in keys]),
            np.array([pid in q.gold for _, pid in keys], dtype=bool),
        )

    def unified(self, settings: Sequence[Setting]) -> np.ndarray:
        """(settings, candidates): U under each setting (of this depth), the bonus of
        :func:`~service.retrieval.page_prior.prior_bonus` (weight * log(1 + n), less the demotion of a known answer
        whose nearest counted question is at cosine < match), in array form."""
        weight, penalty, match = (np.array([getattr(s, f) for s in settings], dtype=np.float64)[:, None] for f in ("weight", "penalty", "match"))
        page = np.where(weight > 0, page_bonus(weight, self.counts), 0.0)
        with np.errstate(invalid="ignore"):  # NaN: not a known answer, never demoted
            far = (penalty > 0) & (self.nearest < match)
            bonus = np.where(far, page - demotion(penalty, match, self.nearest), page)
        return unified_scores(self.w, self.s, bonus)

    def top1(self, settings: Sequence[Setting]) -> np.ndarray:
        """0/1 per setting: the first candidate of the ranking is gold."""
        if not self.keys:
            return np.zeros(len(settings))
        u = self.unified(settings)
        col, found = first(u, np.broadcast_to(self.tie, u.shape), np.isfinite(u))
        return (found & self.gold[col]).astype(np.float64)

    def ranking(self, s: Setting, top_k: int) -> list[tuple[str, str, float]]:
        """The top ``top_k`` (domain, point id, U) at setting ``s``."""
        u = self.unified([s])[0]
        return [(*self.keys[i], float(u[i])) for i in ranking(u, self.tie)[:top_k].tolist()]


def top1(questions: Sequence[PriorQuestion], pages: Pages, weight: float, depth: int, penalty: float = 0.0, match: float = 1.0) -> np.ndarray:
    """0/1 per question: the top passage of its ranking with the bonus (each domain's top ``depth``) is gold."""
    s = Setting(weight, depth, penalty, match)
    return _top1(questions, _evidence(questions, pages), [s])[s]


def _evidence(questions: Sequence[PriorQuestion], pages: Pages) -> list[Evidence]:
    return [pages.evidence((h.point_id for hs in q.per_domain.values() for h in hs), q.gold_docs, q.vector) for q in questions]


def _top1(questions: Sequence[PriorQuestion], evidence: Sequence[Evidence], settings: Sequence[Setting]) -> dict[Setting, np.ndarray]:
    """0/1 per question under each setting: the top passage of its ranking is gold (every setting of a depth at once)."""
    out = {s: np.zeros(len(questions)) for s in settings}
    for depth in sorted({s.depth for s in settings}):
        group = [s for s in settings if s.depth == depth]
        for i, (q, ev) in enumerate(zip(questions, evidence, strict=True)):
            for s, v in zip(group, Ranked.of(q, ev, depth).top1(group).tolist(), strict=True):
                out[s][i] = v
    return out


def _best(scores: Mapping[Setting, np.ndarray], rows: Sequence[int] | np.ndarray) -> Setting:
    """The setting with the best mean over ``rows`` (ties: the smaller weight, depth, penalty, match)."""
    return min(scores, key=lambda s: (-float(scores[s][list(rows)].mean()), s.weight, s.depth, s.penalty, s.match))


def _grid(demotes: bool) -> list[Setting]:
    demotions = [(p, m) for p in PENALTY_GRID for m in MATCH_GRID if p > 0] if demotes else []
    pairs = [(0.0, 1.0), *demotions]
    return [NONE] + [Setting(w, d, p, m) for w in WEIGHT_GRID for d in DEPTH_GRID for p, m in pairs if w > 0 or p > 0]


def fit_page_prior(questions: Sequence[PriorQuestion], pages: Pages, *, seed: int = 0) -> tuple[PagePrior, dict[str, Any]]:
    """``pages``' prior with the fitted weight, depth, penalty and match (see the module docstring); and a report."""
    base_report = {"questions": len(questions), "pages": len(pages.prior.pages), "passages": sum(len(v) for v in pages.prior.members.values())}
    if not questions or not pages.prior.pages:
        return replace(pages.prior, weight=0.0, penalty=0.0), {"chosen": "none", "reason": "no held-out question or no counted page", **base_report}
    demotes = bool(pages.prior.known) and all(q.vector is not None for q in questions)
    evidence = _evidence(questions, pages)
    scores = _top1(questions, evidence, _grid(demotes))
    base = scores[NONE]
    best = _best(scores, range(len(questions)))
    held = np.zeros(len(questions))
    for rest, fold in crossfit_folds(len(questions), FOLDS, seed):
        held[fold] = scores[_best(scores, rest)][fold]
    wins, losses = int(((held > 0) & (base == 0)).sum()), int(((held == 0) & (base > 0)).sum())
    paid = pays(wins, losses)
    chosen = best if paid else Setting(0.0, best.depth)
    penalties = list(PENALTY_GRID) if demotes else [0.0]
    report = {
        "chosen": "page prior" if chosen.weight > 0 or chosen.penalty > 0 else "none",
        "weight": chosen.weight,
        "depth": chosen.depth,
        "penalty": chosen.penalty,
        "match": chosen.match,
        **base_report,
        "counted_questions": len(pages.prior.answers),
        "known_answers": len(pages.prior.known),
        "acc_at_top1": round(float(scores.get(chosen, base).mean()), 4),
        "acc_at_top1_without": round(float(base.mean()), 4),
        "crossfit": {"folds": FOLDS, "acc_at_top1": round(float(held.mean()), 4), "wins": wins, "losses": losses, "pays": paid, "z": SIGN_TEST_Z},
        "grid": {"weight": list(WEIGHT_GRID), "depth": list(DEPTH_GRID), "penalty": penalties, "match": list(MATCH_GRID)},
    }
    return replace(pages.prior, weight=chosen.weight, depth=chosen.depth, penalty=chosen.penalty, match=chosen.match), report
