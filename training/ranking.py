"""Fitting the ranking model (``fedqa train ranking``): one linear score over the candidates' named features.

Every labelled question (the router's validation questions) goes through the pipeline it will be served in: the
default strategy with the router's calibrated p over every domain and the page prior's counts, each question ranked
with the counted questions sharing its gold passages left out of the page prior (:func:`training.page_prior.unseen`),
so that its page count and known answers are those of a new question. From it come the question's candidate pools
(:func:`service.ranking.features.candidate_pool`, one per question of a message) and, beside them, the top passage of
today's default ranking (the served merge, with no ranking model). With a reranker the pools' top N by the default
ranking carry its logit (:func:`service.ranking.features.reranked`, computed by the pipeline as when it serves), so
the reranker's weight is fitted jointly with the other features and guarded with them; without one (or with
FEDQA_RERANK off) those columns are 0 and their weights 0.

The model is a logistic regression on pairwise differences (RankNet's linear case): for each pool with a gold passage,
every (gold, other) pair gives x_gold - x_other labelled 1 and its negation labelled 0, no intercept, each question's
pairs weighing 1 in all; the features are scaled by their spread over the candidates and the weights scaled back, so
the stored score is w . x on the features as :mod:`service.ranking.features` computes them. A question's top passage
under a model is the best of its questions' top candidates, as the service interleaves a message's questions.

The fit also reads each question asked again (its answer counted by the page prior, a known answer at cosine 1): fitted
on new questions alone, every known answer is a wrong one (no two labelled questions share an answer), and the model
learnt to demote them all, a repeated labelled question then never getting its answer (faq6: 0.000 Acc@1 asked again
against the default's 0.714 and 0.710).

One cross-fitted guard (sklearn KFold): each question is ranked by a model fitted on the other folds; the model (fitted
on every question) is stored active only when, out of fold, the questions it wins from today's default ranking outnumber
those it loses by the one-sided sign test of :mod:`training.guard` (as the page prior's and the reranker's guards), and
its Acc@Top1 on the questions asked again is no lower; otherwise it is stored inactive and the default keeps serving.
Stored as ``ranking.json`` beside the router version, with what it was fitted on and those figures.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold

from service.config import Settings
from service.queries import LabelledQuery
from service.ranking.features import DEPTH, FEATURES, Feature, Pool
from service.ranking.model import FOLDS, OBJECTIVE, FittedOn, Objective, RankingMetrics, RankingModel, ranking_path, save_ranking, weights_by_name
from service.retrieval.passage import point_id
from training.guard import pays
from training.page_prior import unseen
from training.versions import save_beside_router


@dataclass(frozen=True)
class LabelledPools:
    """One labelled question as the service sees it: its questions' candidate pools, its gold passages (point ids),
    and whether today's default ranking puts a gold passage first."""

    qid: str
    cross: bool
    pools: tuple[Pool, ...]
    gold: frozenset[str]
    default_top1: bool


@dataclass(frozen=True)
class RankingFit:
    """The fitted model, where it was stored (None: not stored) and the per-question out-of-fold figures."""

    model: RankingModel
    path: str | None
    oof: np.ndarray  # 0/1 per question: its top passage under a model fitted without it is gold
    default: np.ndarray  # 0/1 per question: today's default ranking's top passage is gold


@contextmanager
def default_ranking(pipeline) -> Iterator[None]:  # noqa: ANN001 - a Pipeline
    """While the block runs, ``pipeline`` ranks without a ranking model (today's default merge)."""
    model, pipeline.ranking = pipeline.ranking, None
    try:
        yield
    finally:
        pipeline.ranking = model


def collect(
    pipeline,  # noqa: ANN001 - a Pipeline
    questions: Sequence[LabelledQuery],
    depth: int = DEPTH,
    *,
    asked_again: bool = False,
    rerank_depth: int | None = None,
) -> list[LabelledPools]:
    """The candidate pools of ``questions`` (those with gold passages and domains) through ``pipeline``'s serving path,
    each with the counted questions sharing its gold left out of the page prior; and today's default top passage.
    ``asked_again``: with the question counted, as when a labelled question is asked again (its answer a known one);
    ``rerank_depth``: the pools' top N by the default ranking carry the pipeline's reranker's logit (none: 0)."""
    out = []
    with default_ranking(pipeline):
        for q in questions:
            if not q.gold_doc_ids or not q.domains:
                continue
            gold = frozenset(point_id(d) for d in q.gold_doc_ids)
            with unseen(pipeline, () if asked_again else q.gold_doc_ids):
                served = pipeline.retrieve(q.query, top_k=1, gate_mode="deterministic", rerank=False)
                pooled = pipeline.retrieve(q.query, top_k=1, gate_mode="deterministic", rerank=False, pool_depth=depth, rerank_depth=rerank_depth)
            top = served.hits[0].passage.point_id if served.hits else None
            out.append(LabelledPools(q.qid, q.is_cross, tuple(pooled.pools), gold, top in gold))
    return out


def top_is_gold(model: RankingModel, item: LabelledPools) -> bool:
    """Whether the question's top passage under ``model`` is gold: the best of its questions' top candidates (by score,
    then s), as the service interleaves a message's questions."""
    tops = []
    for pool in item.pools:
        if len(pool):
            i = model.order(pool)[0]
            tops.append((float(model.scores(pool)[i]), pool.entries[i].score, pool.entries[i].point_id))
    if not tops:
        return False
    best = min(tops, key=lambda t: (-t[0], -t[1], t[2]))
    return best[2] in item.gold


def _pairs(items: Sequence[LabelledPools], names: Sequence[Feature]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairwise differences (x_gold - x_other, label 1; its negation, label 0) and their weights (1 per question)."""
    xs, ys, ws = [], [], []
    for item in items:
        diffs = []
        for pool in item.pools:
            x = pool.columns(names)
            g = np.array([e.point_id in item.gold for e in pool.entries], dtype=bool)
            if g.any() and (~g).any():
                diffs.append((x[g][:, None, :] - x[~g][None, :, :]).reshape(-1, len(names)))
        if not diffs:
            continue
        d = np.concatenate(diffs)
        xs += [d, -d]
        ys += [np.ones(len(d)), np.zeros(len(d))]
        ws += [np.full(2 * len(d), 1.0 / (2 * len(d)))]
    if not xs:
        return np.zeros((0, len(names))), np.zeros(0), np.zeros(0)
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)


def _spread(items: Sequence[LabelledPools], names: Sequence[Feature]) -> np.ndarray:
    """Each feature's standard deviation over every candidate of ``items`` (the scale the fit works on)."""
    cols = [p.columns(names) for it in items for p in it.pools if len(p)]
    return np.std(np.concatenate(cols), axis=0) if cols else np.zeros(len(names))


def _softmax_fit(items: Sequence[LabelledPools], names: Sequence[Feature], scale: np.ndarray) -> np.ndarray:
    """Weights (on features divided by ``scale``) minimising sum over questions of -log(the gold passages' softmax share
    of their pool), each question weighing 1, plus 1/2 |w|^2 (sklearn's default strength, C = 1)."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp, softmax

    lists = []
    for item in items:
        found = [(p.columns(names) / scale, np.array([e.point_id in item.gold for e in p.entries])) for p in item.pools]
        found = [(x, g) for x, g in found if g.any() and (~g).any()]
        lists += [(x, g, 1.0 / len(found)) for x, g in found]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.5 * float(w @ w), w.copy()
        for x, g, weight in lists:
            z = x @ w
            total += weight * float(logsumexp(z) - logsumexp(z[g]))
            grad += weight * (x.T @ softmax(z) - x[g].T @ softmax(z[g]))
        return total, grad

    return np.asarray(minimize(loss, np.zeros(len(names)), jac=True, method="L-BFGS-B").x)


def fit_weights(items: Sequence[LabelledPools], names: Sequence[Feature] = FEATURES, objective: Objective = OBJECTIVE) -> tuple[float, ...]:
    """The weights on ``names`` fitted by ``objective`` (0 for a feature that never varies, and for all when no
    question has a gold passage in its pool)."""
    x, y, w = _pairs(items, names)
    if not len(y):
        return tuple(0.0 for _ in names)
    spread = _spread(items, names)
    live = spread > 0
    if not live.any():
        return tuple(0.0 for _ in names)
    coef = np.zeros(len(names))
    if objective is Objective.SOFTMAX:
        kept = [n for n, on in zip(names, live, strict=True) if on]
        coef[live] = _softmax_fit(items, kept, spread[live]) / spread[live]
    else:
        model = LogisticRegression(fit_intercept=False, max_iter=1000).fit(x[:, live] / spread[live], y, sample_weight=w)
        coef[live] = model.coef_[0] / spread[live]
    return tuple(float(c) for c in coef)


def fingerprint(questions: Sequence[LabelledQuery]) -> str:
    """A short hash of the labelled questions fitted on (ids, texts, gold passages)."""
    rows = sorted((q.qid, q.query, sorted(q.gold_doc_ids)) for q in questions)
    return hashlib.sha256(json.dumps(rows).encode("utf-8")).hexdigest()[:16]


_UNMEASURED = RankingMetrics(questions=0, folds=0, acc_at_top1=0.0, default_acc_at_top1=0.0, wins=0, losses=0, in_sample_acc_at_top1=0.0)


def _model(
    weights: Sequence[float], depth: int, fitted_on: FittedOn, metrics: RankingMetrics, active: bool, rerank_depth: int | None = None
) -> RankingModel:
    return RankingModel(
        features=FEATURES, weights=tuple(weights), depth=depth, active=active, fitted_on=fitted_on, metrics=metrics, rerank_depth=rerank_depth
    )


@dataclass(frozen=True)
class HeldOut:
    """0/1 per question: its top passage under a model fitted without it is gold, as a new question and asked again."""

    new: np.ndarray
    again: np.ndarray


def crossfit(
    items: Sequence[LabelledPools],
    depth: int,
    folds: int = FOLDS,
    seed: int = 0,
    objective: Objective = OBJECTIVE,
    repeated: Sequence[LabelledPools] = (),
) -> HeldOut:
    """Each question ranked by the model fitted (by ``objective``) on the other ``folds`` - 1 folds: as a new question
    (``items``) and asked again (``repeated``, the same questions counted by the page prior, in ``items``' order; the
    fit reads both, so that a known answer of a question asked again keeps its place)."""
    new, again = np.zeros(len(items)), np.zeros(len(repeated))
    if len(items) < folds:
        return HeldOut(new, again)
    blank = FittedOn(index=None, retriever=None, router=None, data="", questions=0)
    for train, test in KFold(n_splits=folds, shuffle=True, random_state=seed).split(np.arange(len(items))):
        fit_on = [items[i] for i in train] + [repeated[i] for i in train if i < len(repeated)]
        m = _model(fit_weights(fit_on, FEATURES, objective), depth, blank, _UNMEASURED, True)
        new[test] = [float(top_is_gold(m, items[i])) for i in test]
        if len(repeated):
            again[test] = [float(top_is_gold(m, repeated[i])) for i in test]
    return HeldOut(new, again)


def _collected(
    settings: Settings,
    pipeline,  # noqa: ANN001 - a Pipeline, or None: loaded for the call
    questions: Sequence[LabelledQuery],
    depth: int,
    rerank_depth: int | None,
) -> tuple[list[LabelledPools], list[LabelledPools], dict[str, str | None], int | None]:
    """The questions' pools as new ones and asked again, the versions read, and the reranked depth (None: no reranker)."""
    from service.loading import load_pipeline

    own = pipeline is None
    pipeline = pipeline or load_pipeline(settings, with_llm=False)
    try:
        n = (rerank_depth or settings.rank_rerank_depth) if pipeline.pool_reranker is not None else None
        items = collect(pipeline, questions, depth, rerank_depth=n)
        repeated = collect(pipeline, questions, depth, asked_again=True, rerank_depth=n)
        return items, repeated, pipeline.versions, n
    finally:
        if own:
            pipeline.close()


def fit_ranking(
    settings: Settings,
    questions: Sequence[LabelledQuery],
    *,
    save: bool = True,
    pipeline=None,  # noqa: ANN001
    depth: int = DEPTH,
    folds: int = FOLDS,
    seed: int = 0,
    objective: Objective = OBJECTIVE,
    rerank_depth: int | None = None,
) -> RankingFit:
    """Fit the ranking model for the active versions of ``settings``' home on ``questions`` (the router's validation
    questions), with the guard, and (``save``) store it beside the router version. ``pipeline``: an open one;
    ``rerank_depth``: the reranker's logit read for the pools' top N (default ``settings.rank_rerank_depth``; none read
    without a reranker)."""
    items, repeated, versions, n = _collected(settings, pipeline, questions, depth, rerank_depth)
    if not items:
        raise ValueError("fitting the ranking model needs labelled questions with gold passages and domains")
    held = crossfit(items, depth, folds, seed, objective, repeated)
    oof = held.new
    default = np.array([float(it.default_top1) for it in items])
    default_again = np.array([float(it.default_top1) for it in repeated])
    weights = fit_weights(list(items) + list(repeated), FEATURES, objective)
    wins, losses = int(((oof > 0) & (default == 0)).sum()), int(((oof == 0) & (default > 0)).sum())
    # the guard: out of fold, more questions won than lost by the sign test (training.guard), and no lower asked again
    active = len(items) >= folds and pays(wins, losses) and float(held.again.mean()) >= float(default_again.mean())
    on = FittedOn(
        index=versions.get("index"),
        retriever=versions.get("retriever"),
        router=versions.get("router"),
        data=fingerprint(questions),
        questions=len(items),
        objective=objective,
        reranker=versions.get("reranker") if n is not None else None,
    )
    draft = _model(weights, depth, on, _UNMEASURED, True)
    in_sample = float(np.mean([top_is_gold(draft, it) for it in items]))
    metrics = RankingMetrics(
        questions=len(items),
        folds=folds if len(items) >= folds else 0,
        acc_at_top1=round(float(oof.mean()), 4),
        default_acc_at_top1=round(float(default.mean()), 4),
        wins=wins,
        losses=losses,
        in_sample_acc_at_top1=round(in_sample, 4),
        asked_again_acc_at_top1=round(float(held.again.mean()), 4),
        default_asked_again_acc_at_top1=round(float(default_again.mean()), 4),
    )
    model = _model(weights, depth, on, metrics, active, n)
    path = save_beside_router(settings.home_dir, versions, ranking_path, lambda t: save_ranking(model, t)) if save else None
    return RankingFit(model, path, oof, default)


def report(fit: RankingFit) -> dict[str, object]:
    """What ``fedqa train ranking`` prints: the weights, whether it serves, and its figures."""
    m = fit.model
    return {
        "ranking": fit.path,
        "active": m.active,
        "why": "out of fold it wins more questions from the default ranking than it loses (sign test), and none asked again"
        if m.active
        else "out of fold it does not beat the default ranking by the sign test (or loses asked again, or too few questions): "
        "the default keeps serving",
        "weights": weights_by_name(m),
        "depth": m.depth,
        "rerank_depth": m.rerank_depth,
        "metrics": m.metrics.model_dump(),
        "fitted_on": m.fitted_on.model_dump(),
    }
