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
from service.decisions import FitDecision
from service.generation.abstention import EVIDENCE_FORM, FEATURES, AbstentionModel, Evidence, abstention_path, save_abstention
from service.generation.asked import AskedQuestions, leave_one_out, unit_rows
from service.queries import LabelledQuery
from service.retrieval.strategies import DEFAULT_STRATEGY
from training.fallback import decide
from training.guard import assigned_folds, permuted_folds
from training.page_prior import unseen
from training.versions import fitted_on, save_beside_router

BATCH = 32


@dataclass(frozen=True)
class AbstentionReport:
    """The fitted model, where it was stored, and its held-out figures."""

    model: AbstentionModel
    path: str | None
    heldout: dict[str, Any]


@dataclass(frozen=True)
class QuestionEvidence:
    """Questions (``texts``), their evidence rows (columns: FEATURES), their query vectors (unit rows: what a known
    question is read as) and each one's questions' vectors as retrieval split it (``parts``: what its own
    ``nearest_out`` reads), as the serving path computed them."""

    texts: list[str]
    rows: np.ndarray
    vectors: np.ndarray
    parts: list[np.ndarray]


def question_evidence(
    pipeline,  # noqa: ANN001
    queries: Sequence[str],
    *,
    top_k: int = 5,
    strategy: str = DEFAULT_STRATEGY.value,
    gold: Sequence[Sequence[str]] | None = None,
) -> QuestionEvidence:
    """Evidence of each question through the serving path (default strategy, deterministic gate), with the query
    vector it was routed and searched with. ``gold``: each question's gold passages, left out of the page prior's
    counts while it is ranked (a labelled question the prior counted, scored as a new one)."""
    pipeline.settle()
    rows: list[list[float]] = []
    vectors: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    for start in range(0, len(queries), BATCH):
        window = list(queries[start : start + BATCH])
        for i, (q, prep) in enumerate(zip(window, pipeline.prepare_many(window), strict=True)):
            with unseen(pipeline, gold[start + i] if gold is not None else ()):
                ret = pipeline.retrieve(q, top_k=top_k, gate_mode="deterministic", strategy=strategy, prepared=prep)
            ev, _ = pipeline.answerer.evidence(ret.parts, ret.hits, ret.routing.probabilities, score_sentences=True)
            rows.append(ev.vector(FEATURES))
            vectors.append(prep.vector)
            parts.append(unit_rows(pipeline.answerer.part_vectors(ret.parts)))
    matrix = unit_rows(np.stack(vectors)) if vectors else np.zeros((0, pipeline.encoder.dim), dtype=np.float32)
    return QuestionEvidence(list(queries), np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES)), matrix, parts)


def collect_evidence(
    pipeline,  # noqa: ANN001
    queries: Sequence[str],
    *,
    top_k: int = 5,
    strategy: str = DEFAULT_STRATEGY.value,
    gold: Sequence[Sequence[str]] | None = None,
) -> np.ndarray:
    """The evidence rows of :func:`question_evidence`; shape (n, len(FEATURES))."""
    return question_evidence(pipeline, queries, top_k=top_k, strategy=strategy, gold=gold).rows


NEAREST_OUT = FEATURES.index("nearest_out")


def ask_known(
    groups: Sequence[QuestionEvidence], *, inside: Sequence[int], outside: Sequence[int], domains: Sequence[Sequence[Sequence[str]]]
) -> AskedQuestions:
    """The known questions of a fit (:class:`~service.generation.asked.AskedQuestions`): the ``groups`` ``inside``
    (indices; ``domains``: each of their questions' products, in their order) in scope, ``outside`` out of it; and
    each group's evidence rows (in place) given its ``nearest_out`` against them with its own text left out
    (:func:`~service.generation.asked.leave_one_out`): what the question has when it is asked as a new one."""
    products = tuple(frozenset(d) for group in domains for d in group)
    asked = AskedQuestions(np.vstack([groups[i].vectors for i in inside]), np.vstack([groups[i].vectors for i in outside]), inside_domains=products)
    in_texts = [t for i in inside for t in groups[i].texts]
    out_texts = [t for i in outside for t in groups[i].texts]
    for g in groups:
        if len(g.rows):
            g.rows[:, NEAREST_OUT] = leave_one_out(g.parts, g.texts, asked.inside, in_texts, asked.outside, out_texts)
    return asked


# Without the span score no sentence is embedded at request time when the answer policy quotes whole passages.
CHEAP_FEATURES = tuple(f for f in FEATURES if f != "span_score")
#: Features that are constant without their source: the reranker's score; the rarest word's and the unsaid share
#: (the index's vocabulary); the nearest known questions' (an encoder).
SOURCED = ("rerank_best", "rare_word", "uncovered", "nearest_out")


def fit(
    in_scope: np.ndarray,
    out_of_scope: np.ndarray,
    *,
    false_refusal: float,
    features: Sequence[str] = FEATURES,
    out_weight: np.ndarray | None = None,
) -> AbstentionModel:
    """Logistic regression (balanced classes) on the standardised ``features`` of the evidence rows (all
    FEATURES columns), each out-of-scope row weighing ``out_weight`` (1 each when None); threshold at the in-scope
    ``false_refusal`` quantile of its confidence."""
    from sklearn.linear_model import LogisticRegression

    if len(in_scope) < 2 or len(out_of_scope) < 2:
        raise ValueError("fitting abstention needs at least 2 in-scope and 2 out-of-scope questions")
    cols = [FEATURES.index(f) for f in features]
    x = np.vstack([in_scope, out_of_scope])[:, cols]
    y = np.r_[np.ones(len(in_scope)), np.zeros(len(out_of_scope))]
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    weight = np.r_[np.ones(len(in_scope)), np.ones(len(out_of_scope)) if out_weight is None else out_weight]
    weight[len(in_scope) :] *= len(out_of_scope) / weight[len(in_scope) :].sum()  # the side's weights sum to its size
    clf = LogisticRegression(class_weight="balanced", max_iter=1000).fit((x - mean) / scale, y, sample_weight=weight)
    model = AbstentionModel(
        features=list(features),
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=clf.coef_[0].tolist(),
        intercept=float(clf.intercept_[0]),
        threshold=0.0,
        target_false_refusal=false_refusal,
        evidence_form=EVIDENCE_FORM,
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


def out_of_fold(
    in_scope: np.ndarray,
    out_of_scope: np.ndarray,
    *,
    false_refusal: float,
    folds: int = 5,
    seed: int = 0,
    features: Sequence[str] = FEATURES,
    out_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """k-fold decisions: whether each in-scope question is refused and each out-of-scope one answered not_covered by
    a model fitted on the other folds (``out_weight``: as :func:`fit`); and each fold's figures."""
    rng = np.random.default_rng(seed)
    n = len(in_scope)
    fold = np.concatenate([permuted_folds(n, folds, rng), permuted_folds(len(out_of_scope), folds, rng)])
    refused = np.zeros(n, dtype=bool)
    abstained = np.zeros(len(out_of_scope), dtype=bool)
    per_fold = []
    for train, test in assigned_folds(fold):  # indices into in-scope then out-of-scope rows
        out = train[train >= n] - n
        weight = None if out_weight is None else out_weight[out]
        model = fit(in_scope[train[train < n]], out_of_scope[out], false_refusal=false_refusal, features=features, out_weight=weight)
        held_in, held_out = in_scope[test[test < n]], out_of_scope[test[test >= n] - n]
        refused[test[test < n]] = confidences(model, held_in) < model.threshold
        abstained[test[test >= n] - n] = confidences(model, held_out) < model.threshold
        per_fold.append(measure(model, held_in, held_out))
    return refused, abstained, per_fold


def cross_validate(
    in_scope: np.ndarray,
    out_of_scope: np.ndarray,
    *,
    false_refusal: float,
    folds: int = 5,
    seed: int = 0,
    features: Sequence[str] = FEATURES,
    out_weight: np.ndarray | None = None,
) -> dict[str, Any]:
    """k-fold held-out figures: each fold's questions are measured by a model fitted on the other folds."""
    refused, abstained, per_fold = out_of_fold(
        in_scope, out_of_scope, false_refusal=false_refusal, folds=folds, seed=seed, features=features, out_weight=out_weight
    )
    return {
        "features": list(features),
        "folds": folds,
        "false_refusal_rate": float(refused.sum()) / max(1, len(in_scope)),
        "abstention_rate": float(abstained.sum()) / max(1, len(out_of_scope)),
        "in_scope": int(len(in_scope)),
        "out_of_scope": int(len(out_of_scope)),
        "per_fold": per_fold,
    }


def choose_features(
    in_scope: np.ndarray, out_of_scope: np.ndarray, *, false_refusal: float, folds: int = 5, seed: int = 0, out_weight: np.ndarray | None = None
) -> dict[str, Any]:
    """The k-fold figures of the feature set kept: every feature when that separates at least one more
    held-out question (abstained minus refused) than the set without the span score, else the cheaper set.
    A feature that needs a source (:data:`SOURCED`: a reranker, a vocabulary) is left out when its column is constant."""
    rows = np.vstack([in_scope, out_of_scope])
    every = tuple(f for i, f in enumerate(FEATURES) if f not in SOURCED or (len(rows) and float(np.ptp(rows[:, i])) > 0))
    full = cross_validate(in_scope, out_of_scope, false_refusal=false_refusal, folds=folds, seed=seed, features=every, out_weight=out_weight)
    cheap_set = tuple(f for f in every if f in CHEAP_FEATURES)
    cheap = cross_validate(in_scope, out_of_scope, false_refusal=false_refusal, folds=folds, seed=seed, features=cheap_set, out_weight=out_weight)

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
        e_in = question_evidence(pipeline, [q.query for q in in_scope], gold=[q.gold_doc_ids for q in in_scope])
        e_out = question_evidence(pipeline, [q.query for q in out_of_scope])
        asked = ask_known([e_in, e_out], inside=[0], outside=[1], domains=[[q.domains for q in in_scope]])
        ev_in, ev_out = e_in.rows, e_out.rows
        versions = pipeline.versions
    finally:
        if own:
            pipeline.close()
    heldout = choose_features(ev_in, ev_out, false_refusal=false_refusal, folds=folds, seed=seed)
    model = fit(ev_in, ev_out, false_refusal=false_refusal, features=heldout["features"])
    model.asked = asked
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


@dataclass(frozen=True)
class NotCoveredEvidence:
    """The evidence rows of the questions "not covered" is chosen on: the labelled in-scope questions a fit is
    measured on (the router's validation ones), the out-of-scope ones given with them, the index's heading
    questions, the other labelled in-scope questions (the router's training ones: in the default's fit only) and the
    shipped general questions."""

    labelled: np.ndarray
    out_of_scope: np.ndarray
    headings: np.ndarray
    general: np.ndarray
    known: np.ndarray
    asked: AskedQuestions | None = None  # the labelled and out-of-scope ones as known questions (nearest_out)


@dataclass(frozen=True)
class NotCoveredChoice:
    """The model that serves (the fitted one or the default; None: the index gives too few heading questions for a
    default and there are too few labelled questions), its k-fold figures, and the verdict."""

    model: AbstentionModel | None
    heldout: dict[str, Any]
    decision: FitDecision


def home_weighed(ev: NotCoveredEvidence) -> np.ndarray:
    """The weight of each row of the out-of-scope side (the home's out-of-scope questions, then the shipped general
    ones): the home's weigh together as much as the general ones (each 1). They are questions about this
    documentation's neighbourhood that a curator or the labelled file named; a handful of them among 300 general
    ones would otherwise change nothing (issue 49: four questions about publishing a site left the fit as it was).
    Only the default weighs them so: the model fitted on enough labelled questions weighs each question the same
    (on faq6's two refresh homes, 62 out-of-scope questions each, weighing them so cost one fold 1.8 points of
    balanced accuracy out of fold; docs/decisions/quality-log.md)."""
    home, general = len(ev.out_of_scope), len(ev.general)
    return np.r_[np.full(home, general / home if home and general else 1.0), np.ones(general)]


METRIC = "balanced accuracy"  # mean of the in-scope share answered and the out-of-scope share refused


def balanced_accuracy(refused: np.ndarray, abstained: np.ndarray) -> float:
    """Mean of the share of in-scope questions answered and of out-of-scope ones refused (each side counts the same,
    however many questions it has)."""
    return 0.5 * ((1.0 - float(np.mean(refused))) + float(np.mean(abstained)))


def unasked(rows: np.ndarray) -> np.ndarray:
    """Evidence ``rows`` with ``nearest_out`` held at 0 (a fit on them leaves it out: :func:`choose_features`)."""
    out = rows.copy()
    out[:, NEAREST_OUT] = 0.0
    return out


def choose_not_covered(
    ev: NotCoveredEvidence,
    *,
    needed: int,
    false_refusal: float = 0.03,
    default_false_refusal: float = HEADING_FALSE_REFUSAL,
    with_general: bool = True,
    folds: int = 5,
    seed: int = 0,
) -> NotCoveredChoice:
    """The default or the model fitted on the labelled questions, by :func:`training.fallback.decide`.

    The default: every in-scope question it can have without a fit to measure (the index's heading questions and
    the ``known`` labelled ones) against the home's ``out_of_scope`` questions and the general ones (the home's
    weighing together as much as the general ones: :func:`home_weighed`), at ``default_false_refusal`` (heading
    questions are easier than users'). The fitted model: the labelled questions against ``out_of_scope`` (and the
    general ones when ``with_general``, each question weighing the same) at ``false_refusal``. Both are measured
    on the labelled questions and the fitted model's out-of-scope side, each question decided by a model that did
    not fit on it (the fitted one k-fold; the default fitted without the labelled questions, its out-of-scope
    questions out of fold), both without ``nearest_out`` (:func:`unasked`); the one that serves reads it. The default
    that serves also fits on the labelled questions."""
    inside, beyond, weight = np.vstack([ev.headings, ev.known]), np.vstack([ev.out_of_scope, ev.general]), home_weighed(ev)
    default: AbstentionModel | None = None
    default_heldout: dict[str, Any] = {}
    if len(inside) >= 2 * folds:
        default_heldout = choose_features(inside, beyond, false_refusal=default_false_refusal, folds=folds, seed=seed, out_weight=weight)
        default = fit(inside, beyond, false_refusal=default_false_refusal, features=default_heldout["features"], out_weight=weight)
    outside = beyond if with_general else ev.out_of_scope  # each question weighing the same (see home_weighed)

    def measure_both() -> tuple[float, float]:
        # compared without nearest_out: a question's out-of-fold value reads the other questions of its kind that the
        # fit knows (the same product's, the same topic's), which a new product's questions do not have
        labelled, out, ins, bey = (unasked(x) for x in (ev.labelled, outside, inside, beyond))
        features = choose_features(labelled, out, false_refusal=false_refusal, folds=folds, seed=seed)["features"]
        refused, abstained, _ = out_of_fold(labelled, out, false_refusal=false_refusal, folds=folds, seed=seed, features=features)
        if default is None:  # no default model: every question answered
            return balanced_accuracy(refused, abstained), balanced_accuracy(np.zeros(len(refused)), np.zeros(len(abstained)))
        d_features = choose_features(ins, bey, false_refusal=default_false_refusal, folds=folds, seed=seed, out_weight=weight)["features"]
        d_model = fit(ins, bey, false_refusal=default_false_refusal, features=d_features, out_weight=weight)
        d_refused = confidences(d_model, labelled) < d_model.threshold
        # the default fitted on the out-of-scope and general questions: each decided out of fold
        _, d_abstained, _ = out_of_fold(ins, bey, false_refusal=default_false_refusal, folds=folds, seed=seed, features=d_features, out_weight=weight)
        d_abstained = d_abstained if with_general else d_abstained[: len(ev.out_of_scope)]
        return balanced_accuracy(refused, abstained), balanced_accuracy(d_refused, d_abstained)

    decision = decide(len(ev.labelled), needed, METRIC, measure_both, folds=folds)
    if decision.serves_fitted:
        fitted = choose_features(ev.labelled, outside, false_refusal=false_refusal, folds=folds, seed=seed)
        model = fit(ev.labelled, outside, false_refusal=false_refusal, features=fitted["features"])
        model.asked = ev.asked
        return NotCoveredChoice(model, fitted, decision)
    if default is not None and len(ev.labelled):
        every = np.vstack([inside, ev.labelled])
        default = fit(every, beyond, false_refusal=default_false_refusal, features=default.features, out_weight=weight)
    if default is not None:
        default.asked = ev.asked
    return NotCoveredChoice(default, default_heldout, decision)


def fit_not_covered(
    settings: Settings,
    in_scope: Sequence[LabelledQuery],
    out_of_scope: Sequence[LabelledQuery],
    *,
    false_refusal: float = 0.03,
    with_general: bool = True,
    folds: int = 5,
    seed: int = 0,
    known: Sequence[LabelledQuery] = (),
    save: bool = True,
    pipeline=None,  # noqa: ANN001
) -> NotCoveredReport:
    """Choose "not covered" for the active versions of ``settings``' home (:func:`choose_not_covered`, at least
    ``settings.not_covered_min_questions`` labelled in-scope questions to fit one) and (``save``) store the model
    that serves, with the verdict in ``fit.decision``, beside the active router version (the index version without
    a router). ``in_scope``: labelled questions the documentation answers (the router's validation questions: the
    router has seen its training ones); ``out_of_scope``: labelled ones it does not; ``known``: the other labelled
    in-scope questions (the router's training ones), which only the default fits on. ``pipeline``: an open pipeline
    of that home."""
    from service.loading import load_pipeline
    from training.data.general import general_negatives

    t0 = time.perf_counter()
    own = pipeline is None
    pipeline = pipeline or load_pipeline(settings, with_llm=False)
    general = general_negatives()
    try:
        headings = heading_questions(pipeline, seed=seed)
        evidence = not_covered_evidence(pipeline, in_scope, out_of_scope, headings, general, known)
        versions = pipeline.versions
    finally:
        if own:
            pipeline.close()
    choice = choose_not_covered(
        evidence, needed=settings.not_covered_min_questions, false_refusal=false_refusal, with_general=with_general, folds=folds, seed=seed
    )
    if choice.model is None:
        return NotCoveredReport(None, None, choice.heldout, choice.decision)
    model = choice.model
    if choice.decision.serves_fitted:
        ev_in, ev_out = evidence.labelled, np.vstack([evidence.out_of_scope, evidence.general]) if with_general else evidence.out_of_scope
        sources = {"validation": len(out_of_scope), **({"shipped_general": len(general)} if with_general else {})}
    else:
        ev_in, ev_out = np.vstack([evidence.headings, evidence.known, evidence.labelled]), np.vstack([evidence.out_of_scope, evidence.general])
        sources = {"shipped_general": len(general), "headings": len(headings), "labelled_in_scope": len(known) + len(in_scope)}
        sources["validation"] = len(out_of_scope)
    model.fit = {
        "decision": choice.decision.to_json(),
        "heldout": {k: v for k, v in choice.heldout.items() if k != "per_fold"},
        "on_fit_questions": measure(model, ev_in, ev_out),
        "out_of_scope_sources": sources,
        "reranker": versions.get("reranker"),
        **fitted_on(versions, t0),
    }
    path = save_beside_router(settings.home_dir, versions, abstention_path, lambda t: save_abstention(model, t)) if save else None
    return NotCoveredReport(model, path, choice.heldout, choice.decision)


def not_covered_evidence(
    pipeline,  # noqa: ANN001 - a Pipeline
    in_scope: Sequence[LabelledQuery],
    out_of_scope: Sequence[LabelledQuery],
    headings: Sequence[LabelledQuery],
    general: Sequence[LabelledQuery],
    known: Sequence[LabelledQuery],
) -> NotCoveredEvidence:
    """Every question's evidence through ``pipeline``'s serving path (:func:`collect_evidence`), each labelled one
    ranked with its own gold passages left out of the page prior's counts; the labelled and out-of-scope ones known
    questions (:func:`ask_known`). The heading questions are not: each nearly repeats another heading of its page, far
    nearer to it than a user's question is to any known question, so a fit reading them as known leans on
    ``nearest_out`` and refuses users' in-scope questions (docs/decisions/quality-log.md)."""
    groups = (in_scope, out_of_scope, headings, general, known)
    gold = ([q.gold_doc_ids for q in in_scope], None, None, None, [q.gold_doc_ids for q in known])
    ev = [question_evidence(pipeline, [q.query for q in g], gold=g_gold) for g, g_gold in zip(groups, gold, strict=True)]
    asked = ask_known(ev, inside=[0, 4], outside=[1, 3], domains=[[q.domains for q in in_scope], [q.domains for q in known]])
    return NotCoveredEvidence(labelled=ev[0].rows, out_of_scope=ev[1].rows, headings=ev[2].rows, general=ev[3].rows, known=ev[4].rows, asked=asked)


@dataclass(frozen=True)
class NotCoveredReport:
    """The model that serves (None: none could be fitted), where it was stored, its k-fold figures and the verdict."""

    model: AbstentionModel | None
    path: str | None
    heldout: dict[str, Any]
    decision: FitDecision

    def summary(self) -> dict[str, Any]:
        """What a command prints: the verdict, where the model is, its threshold and k-fold figures."""
        return {
            "decision": self.decision.says(),
            "path": self.path,
            "threshold": self.model.threshold if self.model else None,
            "heldout": {k: v for k, v in self.heldout.items() if k != "per_fold"},
        }


def fit_untrained(settings: Settings, *, seed: int = 0) -> NotCoveredReport:
    """ "Not covered" for a home with no labelled question yet (``fedqa ingest`` fits it when no router is trained):
    the default of :func:`choose_not_covered` (the index's heading questions against the general ones), stored with
    the index version; no model when the index yields too few heading questions. ``fedqa train router`` chooses
    again with its validation questions."""
    return fit_not_covered(settings, [], [], seed=seed)
