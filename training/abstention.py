"""Fitting the "not covered" decision on in-scope and out-of-scope questions.

For every question the serving pipeline gives its evidence (:class:`service.generation.abstention.Evidence`:
the router's highest probability and the sum of its probabilities, the best similarity of the ranking, the
extractive span's score). A logistic
regression separates in-scope from out-of-scope questions; its threshold is the confidence below which a share
``false_refusal`` of the in-scope fitting questions falls. The model is stored with the router version (or the
index version when no router is trained) and reported with figures from questions not used to fit it
(k-fold: each fold is measured by a model fitted on the other folds).

Use the router's validation questions as the in-scope side: the router has seen its training questions and is
over-confident on them. Product names are never features: only the scores are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.config import Settings
from service.generation.abstention import FEATURES, AbstentionModel, Evidence, abstention_path, save_abstention
from service.queries import LabelledQuery
from service.retrieval.strategies import DEFAULT_STRATEGY
from training.page_prior import unseen
from training.versions import fitted_on, save_beside_router

BATCH = 32


@dataclass(frozen=True)
class AbstentionReport:
    """The fitted model, where it was stored, and its held-out figures."""

    model: AbstentionModel
    path: str | None
    heldout: dict[str, Any]


def collect_evidence(
    pipeline,  # noqa: ANN001
    queries: Sequence[str],
    *,
    top_k: int = 5,
    strategy: str = DEFAULT_STRATEGY.value,
    gold: Sequence[Sequence[str]] | None = None,
) -> np.ndarray:
    """Evidence of each question through the serving path (default strategy, deterministic gate); shape
    (n, len(FEATURES)). ``gold``: each question's gold passages, left out of the page prior's counts while it is
    ranked (a labelled question the prior counted, scored as a new one)."""
    rows: list[list[float]] = []
    for start in range(0, len(queries), BATCH):
        window = list(queries[start : start + BATCH])
        for i, (q, prep) in enumerate(zip(window, pipeline.prepare_many(window), strict=True)):
            with unseen(pipeline, gold[start + i] if gold is not None else ()):
                ret = pipeline.retrieve(q, top_k=top_k, gate_mode="deterministic", strategy=strategy, prepared=prep)
            ev, _ = pipeline.answerer.evidence(ret.parts, ret.hits, ret.routing.probabilities, score_sentences=True)
            rows.append(ev.vector(FEATURES))
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))


# Without the span score no sentence is embedded at request time when the answer policy quotes whole passages.
CHEAP_FEATURES = tuple(f for f in FEATURES if f != "span_score")
#: Features that are constant without their source: the reranker's score; the rarest word's and the unsaid share
#: (the index's vocabulary).
SOURCED = ("rerank_best", "rare_word", "uncovered")


def fit(in_scope: np.ndarray, out_of_scope: np.ndarray, *, false_refusal: float, features: Sequence[str] = FEATURES) -> AbstentionModel:
    """Logistic regression (balanced classes) on the standardised ``features`` of the evidence rows (all
    FEATURES columns); threshold at the in-scope ``false_refusal`` quantile of its confidence."""
    from sklearn.linear_model import LogisticRegression

    if len(in_scope) < 2 or len(out_of_scope) < 2:
        raise ValueError("fitting abstention needs at least 2 in-scope and 2 out-of-scope questions")
    cols = [FEATURES.index(f) for f in features]
    x = np.vstack([in_scope, out_of_scope])[:, cols]
    y = np.r_[np.ones(len(in_scope)), np.zeros(len(out_of_scope))]
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    clf = LogisticRegression(class_weight="balanced", max_iter=1000).fit((x - mean) / scale, y)
    model = AbstentionModel(
        features=list(features),
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=clf.coef_[0].tolist(),
        intercept=float(clf.intercept_[0]),
        threshold=0.0,
        target_false_refusal=false_refusal,
    )
    conf = confidences(model, in_scope)
    model.threshold = float(np.quantile(conf, false_refusal, method="lower")) if false_refusal > 0 else float(conf.min())
    return model


def confidences(model: AbstentionModel, rows: np.ndarray) -> np.ndarray:
    """The model's confidence for each evidence row."""
    return np.array([model.confidence(Evidence(*r)) for r in rows.reshape(-1, len(FEATURES))])


def measure(model: AbstentionModel, in_scope: np.ndarray, out_of_scope: np.ndarray) -> dict[str, Any]:
    """Share of in-scope questions refused and of out-of-scope ones answered not_covered."""
    return {
        "false_refusal_rate": float(np.mean(confidences(model, in_scope) < model.threshold)) if len(in_scope) else None,
        "abstention_rate": float(np.mean(confidences(model, out_of_scope) < model.threshold)) if len(out_of_scope) else None,
        "in_scope": int(len(in_scope)),
        "out_of_scope": int(len(out_of_scope)),
    }


def cross_validate(
    in_scope: np.ndarray,
    out_of_scope: np.ndarray,
    *,
    false_refusal: float,
    folds: int = 5,
    seed: int = 0,
    features: Sequence[str] = FEATURES,
) -> dict[str, Any]:
    """k-fold held-out figures: each fold's questions are measured by a model fitted on the other folds."""
    rng = np.random.default_rng(seed)
    fin = rng.permutation(len(in_scope)) % folds
    fout = rng.permutation(len(out_of_scope)) % folds
    refused = abstained = 0
    per_fold = []
    for k in range(folds):
        model = fit(in_scope[fin != k], out_of_scope[fout != k], false_refusal=false_refusal, features=features)
        m = measure(model, in_scope[fin == k], out_of_scope[fout == k])
        per_fold.append(m)
        refused += round((m["false_refusal_rate"] or 0) * m["in_scope"])
        abstained += round((m["abstention_rate"] or 0) * m["out_of_scope"])
    return {
        "features": list(features),
        "folds": folds,
        "false_refusal_rate": refused / max(1, len(in_scope)),
        "abstention_rate": abstained / max(1, len(out_of_scope)),
        "in_scope": int(len(in_scope)),
        "out_of_scope": int(len(out_of_scope)),
        "per_fold": per_fold,
    }


def choose_features(in_scope: np.ndarray, out_of_scope: np.ndarray, *, false_refusal: float, folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """The k-fold figures of the feature set kept: every feature when that separates at least one more
    held-out question (abstained minus refused) than the set without the span score, else the cheaper set.
    A feature that needs a source (:data:`SOURCED`: a reranker, a vocabulary) is left out when its column is constant."""
    rows = np.vstack([in_scope, out_of_scope])
    every = tuple(f for i, f in enumerate(FEATURES) if f not in SOURCED or (len(rows) and float(np.ptp(rows[:, i])) > 0))
    full = cross_validate(in_scope, out_of_scope, false_refusal=false_refusal, folds=folds, seed=seed, features=every)
    cheap = cross_validate(
        in_scope, out_of_scope, false_refusal=false_refusal, folds=folds, seed=seed, features=tuple(f for f in every if f in CHEAP_FEATURES)
    )

    def separated(m: dict[str, Any]) -> float:
        return m["abstention_rate"] * m["out_of_scope"] - m["false_refusal_rate"] * m["in_scope"]

    return full if separated(full) >= separated(cheap) + 1 else cheap


def fit_abstention(
    settings: Settings,
    in_scope: Sequence[LabelledQuery],
    out_of_scope: Sequence[LabelledQuery],
    *,
    false_refusal: float = 0.03,
    folds: int = 5,
    seed: int = 0,
    save: bool = True,
    pipeline=None,  # noqa: ANN001
    sources: dict[str, int] | None = None,
) -> AbstentionReport:
    """Fit the abstention model for the active versions of ``settings``' home, report k-fold held-out
    figures and (``save``) store it with the active router version (the index version without a router).

    ``in_scope``: questions the documentation answers (the router's validation questions);
    ``out_of_scope``: questions it does not (``kind: "oos"``), counted by where they came from in ``sources``
    (recorded with the model). ``pipeline``: an open pipeline of that home.
    """
    from service.loading import load_pipeline

    t0 = time.perf_counter()
    own = pipeline is None
    pipeline = pipeline or load_pipeline(settings, with_llm=False)
    try:
        ev_in = collect_evidence(pipeline, [q.query for q in in_scope], gold=[q.gold_doc_ids for q in in_scope])
        ev_out = collect_evidence(pipeline, [q.query for q in out_of_scope])
        versions = pipeline.versions
    finally:
        if own:
            pipeline.close()
    heldout = choose_features(ev_in, ev_out, false_refusal=false_refusal, folds=folds, seed=seed)
    model = fit(ev_in, ev_out, false_refusal=false_refusal, features=heldout["features"])
    model.fit = {
        "heldout": {k: v for k, v in heldout.items() if k != "per_fold"},
        "on_fit_questions": measure(model, ev_in, ev_out),
        "out_of_scope_sources": sources or {"given": len(out_of_scope)},
        "reranker": versions.get("reranker"),
        **fitted_on(versions, t0),
    }
    path = save_beside_router(settings.home_dir, versions, abstention_path, lambda t: save_abstention(model, t)) if save else None
    return AbstentionReport(model=model, path=path, heldout=heldout)


#: The in-scope refusal target of a fit whose in-scope side is mostly heading questions (:func:`heading_questions`):
#: they are easier than users' questions (manuals_dev: a 1% target on them refused 7.5% of users' in-scope
#: questions, 3% refused 13%), so the target is lower than a fit on users' questions uses.
HEADING_FALSE_REFUSAL = 0.01


def heading_questions(pipeline, *, per_domain: int = 100, seed: int = 0) -> list[LabelledQuery]:  # noqa: ANN001
    """In-scope questions made from the pipeline's index: each product's section headings as questions
    (:class:`~training.data.synthetic.HeuristicQueryGenerator`), at most ``per_domain`` distinct ones a product, from
    passages drawn with ``seed``."""
    from training.data.synthetic import HeuristicQueryGenerator

    rng = np.random.default_rng(seed)
    generator = HeuristicQueryGenerator(first_sentence=False)
    out: list[LabelledQuery] = []
    for domain in pipeline.domains:
        passages = list(pipeline.store.iter_passages(domain))
        asked: dict[str, int] = {}
        for i in rng.permutation(len(passages)):
            q = generator.title_question(passages[int(i)])
            if q and q not in asked and len(asked) < per_domain:
                asked[q] = int(i)
        out += [LabelledQuery(f"heading-{domain}-{i}", q, [domain]) for q, i in asked.items()]
    return out


def fit_untrained(
    settings: Settings, *, per_domain: int = 100, false_refusal: float = HEADING_FALSE_REFUSAL, seed: int = 0
) -> AbstentionReport | None:
    """ "Not covered" for a home with no labelled question yet (``fedqa ingest`` fits it when no router is trained):
    in-scope questions made from the active index's own section headings (:func:`heading_questions`) against the
    general out-of-scope questions shipped with fedqa, at a low in-scope refusal target (heading questions are easier
    than users'); stored with the index version. None when the index yields too few heading questions.
    ``fedqa train router`` replaces it."""
    from service.loading import load_pipeline
    from training.data.general import general_negatives

    pipeline = load_pipeline(settings, with_llm=False)
    try:
        in_scope = heading_questions(pipeline, per_domain=per_domain, seed=seed)
        if len(in_scope) < 2 * 5:
            return None
        general = general_negatives()
        sources = {"general": len(general), "headings": len(in_scope)}
        return fit_abstention(settings, in_scope, general, false_refusal=false_refusal, pipeline=pipeline, sources=sources)
    finally:
        pipeline.close()
