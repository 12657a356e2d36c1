"""Fits against a bundle of versions that is not active yet: the router and the decisions fitted for it (split, "not
covered"), so that a version is never activated without them (``fedqa train router`` and :mod:`training.refresh`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.artifacts import MANIFEST, Bundle, Registry
from service.config import Settings
from service.decisions import Verdict
from service.queries import LabelledQuery
from training.versions import METRICS_FILE, save_version

if TYPE_CHECKING:
    from service.pipeline import Pipeline
    from service.retrieval.store import Store
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData
    from training.router import RouterConfig


@dataclass
class Questions:
    """The labelled questions a refresh fits on: the router's training and held-out ones, the reference answers."""

    train: list[LabelledQuery]
    val: list[LabelledQuery]
    answered: list[LabelledQuery]  # with reference answers (the answer policy's)
    fingerprint: str
    origins: list[str] | None = None
    synthetic: list[LabelledQuery] | None = None
    gold: list[LabelledQuery] | None = None  # training questions with gold passages (None: those of train)
    data: TrainingData | None = None

    @property
    def known(self) -> list[LabelledQuery]:
        """The labelled training questions (what the "not covered" default fits on beside the index's headings)."""
        return self.gold if self.gold is not None else self.train


def router_sets_from_data(data: TrainingData, *, synthetic_per_domain: int | None, seed: int) -> Questions:
    """The router's questions of a built training set: its expert and synthetic training rows, its held-out ones
    (out-of-scope ones included)."""
    from training.router_data import router_queries_from_data

    train, origins, synthetic = router_queries_from_data(data, synthetic_per_domain=synthetic_per_domain, seed=seed)
    gold = [LabelledQuery(r.qid, r.query, r.domains, r.positives) for r in data.retriever_rows if r.origin != "synthetic"]
    return Questions(train, data.val + data.val_oos, [], data.fingerprint, origins, synthetic, gold, data)


@dataclass(frozen=True)
class NotCoveredQuestions:
    """What "not covered" is fitted on from a router's split: the held-out questions in scope and out of it, and the
    labelled training questions in scope (the default's ``known``)."""

    in_scope: list[LabelledQuery]
    out_of_scope: list[LabelledQuery]
    known: list[LabelledQuery]

    @classmethod
    def of(cls, val: Sequence[LabelledQuery], known: Sequence[LabelledQuery]) -> NotCoveredQuestions:
        """Split a router's held-out questions ``val`` and training questions ``known`` by whether they have a domain."""
        return cls([q for q in val if q.domains], [q for q in val if not q.domains], [q for q in known if q.domains])


def last_refresh_questions(settings: Settings, *, seed: int = 0) -> Questions:
    """The router's questions of the training set the home's last refresh built (``refresh.json``'s data build;
    ``$FEDQA_HOME/refresh/data-*``), split as the refresh split them with ``seed``; ValueError when it built none."""
    from training.configs import RouterConfig
    from training.data.dataset import TrainingData
    from training.refresh_record import DATA_FOLDER, RefreshRecord, Stage

    version = (RefreshRecord.load(Registry(settings.home_dir)).stages.get(Stage.DATA.value) or {}).get("version")
    folder = settings.home_dir / DATA_FOLDER / str(version)
    if not version or not (folder / "manifest.json").is_file():
        raise ValueError(f"{settings.home_dir} has no training set of a refresh ({DATA_FOLDER}/data-*): run fedqa refresh --corpus there first")
    return router_sets_from_data(TrainingData.load(folder), synthetic_per_domain=RouterConfig().synthetic_per_domain, seed=seed)


def not_covered_on(settings: Settings, val: Sequence[LabelledQuery], known: Sequence[LabelledQuery], pipeline: Pipeline) -> dict[str, Any] | None:
    """Choose the "not covered" decision for ``pipeline``'s versions (:func:`training.abstention.fit_not_covered`):
    fitted on the router's held-out questions against their out-of-scope ones and the general ones shipped with the
    package, or the default (the index's headings and the labelled training questions ``known`` against those
    out-of-scope questions and the general ones) when they are too few or it measures worse out of sample. What was
    chosen, or None without two in-scope held-out questions."""
    from training.abstention import fit_not_covered

    sets = NotCoveredQuestions.of(val, known)
    if len(sets.in_scope) < 2:
        return None
    report = fit_not_covered(settings, sets.in_scope, sets.out_of_scope, known=sets.known, pipeline=pipeline)
    return {**report.summary(), "serves_fitted": report.decision.serves_fitted}


def fit_split_on(settings: Settings, val: Sequence[LabelledQuery], pipeline: Pipeline) -> dict[str, Any] | None:
    """Fit when to answer by product for ``pipeline``'s router on its held-out labelled questions; its figures (None
    without any)."""
    from training.split import fit_split

    labelled = [q for q in val if q.domains and q.gold_doc_ids]
    if not labelled:
        return None
    report = fit_split(settings, labelled, pipeline=pipeline)
    decision = report.rule.fit["decision"]
    return {"path": report.path, "decision": decision["says"], "serves_fitted": decision["verdict"] == Verdict.FITTED.value, **report.report}


@contextmanager
def bundle_pipeline(settings: Settings, bundle: Bundle, store: Store) -> Iterator[Pipeline]:
    """The serving pipeline of ``bundle`` (no LLM) over its index's open ``store`` (left open), embedding sentences
    as the fits ask for them (no background embedding of the whole index: each fit opens its own pipeline, and the
    fit's vectors do not depend on a thread's timing)."""
    from service.loading import load_pipeline

    fitting = settings.model_copy(update={"sentence_vectors_precompute": 0})
    pipeline = load_pipeline(fitting, with_llm=False, store=store, bundle=bundle)
    try:
        yield pipeline
    finally:
        pipeline.close(close_store=False)


@dataclass
class RouterFit:
    """A router version fitted (not activated) with its decisions, and their figures."""

    version: str
    abstention: dict[str, Any] | None
    split: dict[str, Any] | None


def train_router_bundle(
    settings: Settings,
    questions: Questions,
    *,
    config: RouterConfig,
    progress: bool,
    activate: bool,
    stop: StopFlag | None = None,
    data_path: str | None = None,
) -> RouterFit:
    """``fedqa train router``: a router version for the active index, its split and "not covered" decisions fitted
    against it before it is activated (``activate``), so that the service never serves it without them."""
    from indexes.rebuild import index_store
    from training.router import train_and_activate

    registry = Registry(settings.home_dir)
    active = registry.bundle()
    if not active.index:
        raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
    with index_store(settings, active.index) as store:
        version = train_and_activate(
            settings,
            questions.train,
            val=questions.val,
            origins=questions.origins,
            synthetic=questions.synthetic,
            config=config,
            progress=progress,
            activate=False,
            data_fingerprint=questions.fingerprint if questions.data is not None else None,
            data_path=data_path,
            stop=stop,
            answered=questions.gold,
            store=store,
        )
        bundle = active.with_version("router", version)
        with bundle_pipeline(settings, bundle, store) as pipeline:
            split = fit_split_on(settings, questions.val, pipeline)
            abstention = not_covered_on(settings, questions.val, questions.known, pipeline)
    if activate:
        registry.activate_many(Bundle(router=version), expect=active)
    return RouterFit(version, abstention, split)


def copy_router(registry: Registry, version: str) -> str:
    """A new router version with ``version``'s files (its head and fitted parts), for decisions refitted on a bundle
    whose router did not change: the active version's files are never rewritten."""
    source = registry.path("router", version)
    manifest = {k: v for k, v in registry.manifest("router", version).items() if k not in ("kind", "version", "created", "metrics")}
    metrics = json.loads((source / METRICS_FILE).read_text(encoding="utf-8")) if (source / METRICS_FILE).is_file() else {}

    def write(path: Path) -> None:
        for f in source.iterdir():
            if f.name in (MANIFEST, METRICS_FILE):
                continue
            (shutil.copytree if f.is_dir() else shutil.copy2)(f, path / f.name)

    return save_version(registry, "router", write, metrics, {**manifest, "copied_from": version}, activate=False)
