"""The fitted ranking model: score = w . x over a candidate's named features (:mod:`service.ranking.features`).

One artifact holds every number of the ranking (the weights, by feature name, the pool depth and the reranked depth N),
what it was fitted on (index, retriever, router and reranker versions and a fingerprint of the labelled questions) and
its out-of-sample figures. It
is fitted by ``fedqa train ranking`` (training/ranking.py) and stored as ``ranking.json`` beside the router version; it
serves (the default strategy's final order is by its score) only when its guard passed (``active``) and it was fitted
on the versions that serve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.artifacts import Registry, load_fitted, write_json_atomic
from service.choices import Choice
from service.ranking.features import RERANK_FEATURES, Feature, Pool
from service.retrieval.federated import Candidate
from service.retrieval.unified import rank_order, unified_scores

RANKING_FILE = "ranking.json"
FOLDS = 5  # the guard's cross-fit (fedqa train ranking --folds)


class Objective(Choice):
    """How the weights are fitted (training/ranking.py): a logistic regression on pairwise differences (every gold
    passage against every other candidate), or a softmax over each pool (the gold passages' share of it: the
    candidates near the top count most, as Acc@1 does)."""

    PAIRWISE = "pairwise"
    SOFTMAX = "softmax"


#: fedqa train ranking --objective: softmax ranked no lower than pairwise out of sample in every measurement (faq6 two
#: folds and the refresh's held-out halves, manuals_dev one fold on the other; docs/ranking.md)
OBJECTIVE = Objective.SOFTMAX


class FittedOn(BaseModel):
    """What a ranking model was fitted on: the serving versions and the labelled questions (``data``: a fingerprint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: str | None
    retriever: str | None
    router: str | None
    data: str
    reranker: str | None = None  # the reranker whose logit the pools read (None: fitted without one)
    questions: int = Field(ge=0)
    objective: Objective = OBJECTIVE


class RankingMetrics(BaseModel):
    """Out-of-fold Acc@Top1 of the model's fit (each question ranked by a model fitted without it) beside today's
    default ranking on the same questions, the questions one wins and the other loses, the in-sample figure, and both
    rankings' Acc@Top1 on the same questions asked again (a labelled question repeated: its answer a known one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    questions: int = Field(ge=0)
    folds: int = Field(ge=0)
    acc_at_top1: float
    default_acc_at_top1: float
    wins: int = Field(ge=0)
    losses: int = Field(ge=0)
    in_sample_acc_at_top1: float
    asked_again_acc_at_top1: float | None = None  # the same questions asked again (each one counted by the page prior), out of fold
    default_asked_again_acc_at_top1: float | None = None


class RankingModel(BaseModel):
    """Weights by feature name (score = w . x), the pool depth it ranks, the top N of it the reranker scores (None:
    fitted without a reranker), whether it serves, its provenance and figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    features: tuple[Feature, ...]
    weights: tuple[float, ...]
    depth: int = Field(ge=1)
    active: bool
    rerank_depth: int | None = Field(default=None, ge=1)
    fitted_on: FittedOn
    metrics: RankingMetrics

    @model_validator(mode="after")
    def _check(self) -> RankingModel:
        if len(self.features) != len(self.weights):
            raise ValueError(f"{len(self.features)} features but {len(self.weights)} weights")
        if len(set(self.features)) != len(self.features):
            raise ValueError("a feature is named twice")
        if not all(math.isfinite(w) for w in self.weights):
            raise ValueError("a weight is not finite")
        return self

    @property
    def uses_reranker(self) -> bool:
        """Whether its score reads the reranker's logit (a reranked depth and a weight on a reranker feature)."""
        return self.rerank_depth is not None and any(w != 0.0 for f, w in zip(self.features, self.weights, strict=True) if f in RERANK_FEATURES)

    @property
    def reranked_depth(self) -> int | None:
        """The top N of a pool whose reranker logit its score reads (None: it reads none)."""
        return self.rerank_depth if self.uses_reranker else None

    def serves(self, versions: Mapping[str, str | None]) -> bool:
        """Whether it orders the default strategy's passages for these serving versions (its guard passed, and it was
        fitted on this index, retriever and router, and on the reranker that serves when its score reads one)."""
        on = self.fitted_on
        same = (on.index, on.retriever, on.router) == (versions.get("index"), versions.get("retriever"), versions.get("router"))
        return self.active and same and (not self.uses_reranker or on.reranker == versions.get("reranker"))

    def says(self, versions: Mapping[str, str | None] | None = None) -> str:
        """Whether it serves and why, one line (``fedqa status``, ``/readyz``); ``versions``: the serving ones (None:
        its guard's verdict alone, as the refresh that fitted it reports it)."""
        if versions is not None and self.active and not self.serves(versions):
            on = self.fitted_on
            return f"default ranking serves: the model was fitted on other versions (router {on.router}, index {on.index}; refit: fedqa refresh)"
        return f"{'model serves' if self.active else 'default ranking kept'}: {self.why()}"

    def why(self) -> str:
        """What its guard did, with its out-of-fold figures (training/ranking.py): the questions won from the default
        ranking outnumbered those lost by the sign test and none was lost asked again, or which of these failed."""
        f = self.metrics
        acc = f"Acc@1 {f.acc_at_top1:.3f} vs default {f.default_acc_at_top1:.3f}"
        figures = f"out of fold {acc} on {f.questions} questions, {f.wins} won, {f.losses} lost"
        if self.active:
            return f"it beat the default by the sign test ({figures})"
        if f.folds == 0:
            return f"{f.questions} labelled questions, too few for its cross-fit ({figures})"
        again, default_again = f.asked_again_acc_at_top1, f.default_asked_again_acc_at_top1
        if again is not None and default_again is not None and again < default_again:
            return f"it lost asked again (Acc@1 {again:.3f} vs default {default_again:.3f}; {figures})"
        return f"it did not beat the default by the sign test ({figures})"

    def scores(self, pool: Pool) -> np.ndarray:
        """w . x of every candidate of ``pool``."""
        return pool.columns(self.features) @ np.asarray(self.weights, dtype=np.float64)

    def order(self, pool: Pool) -> list[int]:
        """The pool's rows best first: by score, equal scores in U's tie order (s, then point id, then domain:
        :func:`service.retrieval.unified.rank_order`, the merge's)."""
        e = pool.entries
        return rank_order(self.scores(pool).tolist(), [x.score for x in e], [x.point_id for x in e], [x.domain for x in e])

    def rank(self, pool: Pool, probs: Mapping[str, float], top_k: int) -> list[Candidate]:
        """The top ``top_k`` of ``pool`` as the merge's candidates: ``rank_score`` the model's score, U = w_j * s+
        (:func:`service.retrieval.unified.unified_scores`, w_j the pool's merge weight) shown beside it, the features
        read (``probs``: the router's p_j, shown as product_probability; w_j shown as weight where it is not p_j, as the
        merge shows it)."""
        sc = self.scores(pool)
        e = pool.entries
        u = unified_scores([x.weight for x in e], [x.score for x in e]).tolist()
        out = []
        for i in self.order(pool)[:top_k]:
            out.append(
                Candidate(
                    e[i].domain,
                    e[i].point_id,
                    e[i].score,
                    e[i].weight,
                    u[i],
                    rank_score=float(sc[i]),
                    features=pool.rank_features(i, probs.get(e[i].domain)),
                )
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = RANKING_FILE) -> RankingModel:
        """Read the stored form; ValueError naming the file when it is not a ranking model."""
        try:
            return cls.model_validate(dict(data))
        except ValueError as exc:
            raise ValueError(f"{name} is not a ranking model: {exc}") from exc


def ranking_path(registry: Registry, router_version: str | None, index_version: str | None = None) -> Path | None:
    """Where the ranking model fitted for ``router_version`` is stored (None: no router, no place)."""
    return registry.path("router", router_version) / RANKING_FILE if router_version else None


def save_ranking(model: RankingModel, path: Path) -> None:
    write_json_atomic(path, model.to_json())


def load_ranking(path: Path | None) -> RankingModel | None:
    """The model stored at ``path``, or None when none was fitted."""
    return load_fitted(path, RankingModel.from_json)


def weights_by_name(model: RankingModel) -> dict[str, float]:
    """The weights keyed by feature name (for reports)."""
    return {str(f): w for f, w in zip(model.features, model.weights, strict=True)}


def features_of(names: Sequence[str]) -> tuple[Feature, ...]:
    """Feature names as :class:`Feature` (ValueError for a name that is none)."""
    return tuple(Feature(n) for n in names)
