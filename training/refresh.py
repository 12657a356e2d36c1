"""``fedqa refresh``: every fitted part of a data home, in serving order, fitted before anything is activated.

Stages (:class:`Stage`), each fitted against the versions the earlier stages made, none of them active yet:

    data build -> retriever -> index -> router -> reranker -> ranking model -> answer policy -> split -> "not covered"

Two flows (:class:`Flow`): with a corpus (``--corpus``, as ``fedqa data build``) the whole chain runs, the retriever
fine-tuned on the built training set and the index re-embedded with it; with labelled questions alone (a home made
by ``fedqa ingest``) the first three stages are skipped and the router is a head over the index's retriever, as
``fedqa train router --queries`` trains it. The reranker runs only when asked (``--reranker``).

Then one atomic write of ``active.json`` switches every kind together (:meth:`service.artifacts.Registry.activate_many`):
a stage that fails, or a refresh that is killed, leaves the previous bundle serving. The index is read from a copy while a
running ``fedqa serve`` holds it (:func:`indexes.rebuild.opened_index`), so every fit completes beside a service, which
picks the bundle up on ``POST /admin/reload``.

What the home's feedback establishes (:mod:`training.refresh_feedback`: passages curators, or enough keys,
confirmed; questions marked not covered) is added to the labelled and the out-of-scope questions of every fit unless
``--no-feedback``; the router version records how many (``feedback`` in its manifest), as ``refresh.json`` does.

A stage whose inputs are unchanged since the home's last refresh (their fingerprints, the feedback's included,
recorded in ``$FEDQA_HOME/refresh.json`` with the inputs) is skipped and its version reused; a refresh with no
inputs reuses the recorded ones (and reads the feedback again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.artifacts import Registry
from service.config import Settings
from service.decisions import Verdict
from service.generation.abstention import EVIDENCE_FORM, FEATURES
from service.queries import Catalogue, LabelledQuery, check_labels, load_files, unknown_labels
from training.bundle_fit import Questions, bundle_pipeline, copy_router, fit_split_on, not_covered_on, router_sets_from_data
from training.refresh_feedback import RefreshFeedback, read_feedback
from training.refresh_record import (
    DATA_FOLDER,
    VAL_FRACTION,
    Flow,
    Outcome,
    Progress,
    RefreshInputs,
    RefreshOptions,
    RefreshRecord,
    RefreshReport,
    Stage,
    fingerprint,
    is_complete,
)

if TYPE_CHECKING:
    from service.retrieval.store import Store
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData

log = logging.getLogger("fedqa.refresh")


class Refresh:
    """One run of :func:`refresh` (its stages as methods, sharing the bundle being fitted)."""

    def __init__(self, settings: Settings, inputs: RefreshInputs, options: RefreshOptions, say: Callable[[str], None], stop: StopFlag | None) -> None:
        self.settings, self.options, self.stop = settings, options, stop
        self.registry = Registry(settings.home_dir)
        self.record = RefreshRecord.load(self.registry)
        self.bundle = self.start = self.registry.bundle()
        if not self.bundle.index:
            raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
        if not inputs.given and self.record.inputs.given:
            inputs = self.record.inputs
        self.inputs = inputs.absolute()
        self.feedback = self._feedback()
        if not self.inputs.given and not self.feedback.queries:
            raise ValueError(
                "no inputs given, no labelled question in the feedback and this home has no earlier refresh to reuse: "
                "pass --queries (and --corpus, --out-of-scope)"
            )
        self.inputs_fingerprint = self.inputs.fingerprint()
        if not self.feedback.empty:  # unchanged without feedback: a home's earlier refreshes stay reusable
            self.inputs_fingerprint = fingerprint(self.inputs_fingerprint, self.feedback.fingerprint())
        self.val_fraction = VAL_FRACTION[self.inputs.flow] if options.val_fraction is None else options.val_fraction
        self.fresh: dict[str, dict[str, Any]] = {}  # stage -> {"fingerprint", "version"}: the record's next entries
        stages = [Stage.DATA, Stage.RETRIEVER, Stage.INDEX] if self.inputs.flow is Flow.CORPUS else []
        self.progress = Progress([*stages, Stage.ROUTER, Stage.RERANKER, Stage.RANKING, Stage.ANSWER, Stage.SPLIT, Stage.NOT_COVERED], say)

    # stages --------------------------------------------------------------------
    def data(self) -> TrainingData:
        """Build the training set (or reuse the one built from the same inputs)."""
        from training.data.build import DataConfig, build_training_data
        from training.data.corpus import load_corpus
        from training.data.dataset import TrainingData
        from training.data.synthetic import HeuristicQueryGenerator

        config = DataConfig(val_fraction=self.val_fraction, seed=self.options.seed)
        fp = fingerprint(self.inputs_fingerprint, asdict(config))
        out = self.settings.home_dir / DATA_FOLDER / f"data-{fp[:16]}"
        self.fresh[Stage.DATA.value] = {"fingerprint": fp, "version": out.name}
        if (out / "manifest.json").is_file():
            data = TrainingData.load(out)
            self.progress.skip(Stage.DATA, Outcome.UNCHANGED, f"training set {out.name} (fingerprint {data.fingerprint[:12]})", out.name)
            return data
        with self.progress.stage(Stage.DATA) as done:
            corpus = load_corpus([Path(p) for p in self.inputs.corpus], self.settings)
            catalogue = Catalogue.of("the corpus", (p.domain for p in corpus), (p.doc_id for p in corpus))
            queries, oos = self._checked(catalogue)
            queries, oos = [*queries, *self.feedback.queries], [*oos, *self.feedback.out_of_scope]
            report = build_training_data(
                corpus,
                queries,
                out,
                generators=[HeuristicQueryGenerator()],
                config=config,
                sources=list(self.inputs.corpus),
                overwrite=True,
                progress=self.options.progress,
                out_of_scope=oos,
            )
            done(figure=f"{len(queries)} labelled questions, {len(corpus)} passages; fingerprint {report.fingerprint[:12]}", version=out.name)
        return TrainingData.load(out)

    def retriever(self, data: TrainingData) -> str:
        """Fine-tune the retriever on the training set (or reuse the version fitted on the same one)."""
        from training.retriever import RetrieverConfig, train_and_save

        config = RetrieverConfig(seed=self.options.seed)
        fp = fingerprint(data.fingerprint, asdict(config))
        reused = self.record.version(Stage.RETRIEVER, fp)
        self.fresh[Stage.RETRIEVER.value] = {"fingerprint": fp, "version": reused}
        if is_complete(self.registry, "retriever", reused):
            assert reused is not None
            self.progress.skip(Stage.RETRIEVER, Outcome.UNCHANGED, f"retriever {reused}", reused)
            return reused
        with self.progress.stage(Stage.RETRIEVER) as done:
            version, metrics = train_and_save(self.settings, data, config=config, activate=False, progress=self.options.progress, stop=self.stop)
            self.fresh[Stage.RETRIEVER.value]["version"] = version
            done(figure=_retriever_figure(metrics), version=version)
        return version

    def index(self, retriever: str) -> str:
        """Re-embed the active index with ``retriever`` (reused when the active index already is)."""
        from indexes.rebuild import rebuild_index

        active = self.bundle.index
        assert active is not None
        if self.registry.manifest("index", active).get("retriever") == retriever:
            self.progress.skip(Stage.INDEX, Outcome.UNCHANGED, f"index {active} is embedded with {retriever}", active)
            return active
        with self.progress.stage(Stage.INDEX) as done:
            report = rebuild_index(self.settings, retriever=retriever, activate=False, progress=self.options.progress)
            assert report.version is not None
            done(figure=f"{sum(report.domains.values())} passages re-embedded", version=report.version)
        return report.version

    def router(self, questions: Questions, store: Store) -> tuple[str, bool]:
        """Train the router over the bundle's index (or reuse the one fitted on the same inputs); (version, new)."""
        from training.router import RouterConfig, train_and_activate

        config = RouterConfig(seed=self.options.seed)
        if self.options.router_epochs is not None:
            config.epochs = self.options.router_epochs
        fp = fingerprint(self.bundle.index, questions.fingerprint, asdict(config), self.val_fraction)
        reused = self.record.version(Stage.ROUTER, fp)
        self.fresh[Stage.ROUTER.value] = {"fingerprint": fp, "version": reused}
        if is_complete(self.registry, "router", reused):
            assert reused is not None
            self.progress.skip(Stage.ROUTER, Outcome.UNCHANGED, f"router {reused}", reused)
            return reused, False
        with self.progress.stage(Stage.ROUTER) as done:
            version = train_and_activate(
                self.settings,
                questions.train,
                val=questions.val,
                origins=questions.origins,
                synthetic=questions.synthetic,
                config=config,
                progress=self.options.progress,
                activate=False,
                data_fingerprint=questions.data.fingerprint if questions.data is not None else None,
                data_path=str(questions.data.path) if questions.data is not None else None,
                stop=self.stop,
                answered=questions.gold,
                index=self.bundle.index,
                store=store,
                feedback=self.feedback,
            )
            self.fresh[Stage.ROUTER.value]["version"] = version
            done(figure=_router_figure(self.registry.manifest("router", version)), version=version)
        return version, True

    def reranker(self, data: TrainingData | None, store: Store) -> str | None:
        """Train the reranker on the bundle's rankings when asked (else the active one stays)."""
        from training.reranker import RerankerConfig
        from training.reranker_version import train_and_save

        if not self.options.reranker:
            self.progress.skip(Stage.RERANKER, Outcome.SKIPPED, "not asked (--reranker)", self.bundle.reranker)
            return self.bundle.reranker
        if data is None:
            self.progress.skip(Stage.RERANKER, Outcome.SKIPPED, "needs a training set (--corpus)", self.bundle.reranker)
            return self.bundle.reranker
        config = RerankerConfig(seed=self.options.seed)
        fp = fingerprint(self.bundle.index, self.bundle.router, data.fingerprint, asdict(config))
        reused = self.record.version(Stage.RERANKER, fp)
        self.fresh[Stage.RERANKER.value] = {"fingerprint": fp, "version": reused}
        if is_complete(self.registry, "reranker", reused):
            self.progress.skip(Stage.RERANKER, Outcome.UNCHANGED, f"reranker {reused}", reused)
            return reused
        with self.progress.stage(Stage.RERANKER) as done:
            version, metrics = train_and_save(
                self.settings, data, config=config, activate=False, progress=self.options.progress, stop=self.stop, bundle=self.bundle, store=store
            )
            self.fresh[Stage.RERANKER.value]["version"] = version
            done(figure=f"weight {(metrics.get('params') or {}).get('weight')}", version=version)
        return version

    def ranking(self, questions: Questions, store: Store) -> None:
        """The ranking model on the router's held-out labelled questions, stored beside the bundle's router; it serves
        (and the decisions after it are fitted on its ranking) only when its guard says it pays (training/ranking.py)."""
        from training.ranking import fit_ranking

        labelled = [q for q in questions.val if q.domains and q.gold_doc_ids]
        if not labelled:
            self.progress.skip(Stage.RANKING, Outcome.SKIPPED, "no held-out question with gold passages")
            return
        with self.progress.stage(Stage.RANKING) as done, bundle_pipeline(self.settings, self.bundle, store) as pipeline:
            m = fit_ranking(self.settings, labelled, pipeline=pipeline).model
            if m.active:
                done(Outcome.FITTED, f"model serves: {m.why()}")
            else:
                done(Outcome.DEFAULT, m.why())

    def decisions(self, questions: Questions, store: Store, router_is_new: bool) -> None:
        """The ranking model, the answer policy, the split and "not covered", in that order, fitted for the bundle's
        router (a copy of it when the router is reused but the ranking it serves changed)."""
        from training.answer_policy import fit_answer_policy

        def inputs() -> str:  # the bundle, the questions, and the form of "not covered"'s evidence
            return fingerprint(self.bundle.as_dict(), questions.fingerprint, [q.qid for q in questions.answered], EVIDENCE_FORM, FEATURES)

        fp = inputs()
        entry = self.record.stages.get(Stage.NOT_COVERED.value) or {}
        if not router_is_new and entry.get("fingerprint") == fp:
            for stage in (Stage.RANKING, Stage.ANSWER, Stage.SPLIT, Stage.NOT_COVERED):
                self.progress.skip(stage, Outcome.UNCHANGED, f"fitted with router {self.bundle.router}", self.bundle.router)
            self.fresh[Stage.NOT_COVERED.value] = entry
            return
        if not router_is_new:
            assert self.bundle.router is not None
            self.bundle = self.bundle.with_version("router", copy_router(self.registry, self.bundle.router))
            self.fresh[Stage.ROUTER.value]["version"] = self.bundle.router  # the copy serves: the next refresh reuses it
            fp = inputs()
        self.ranking(questions, store)
        answered = [q for q in questions.answered if q.answer]
        if answered:
            with self.progress.stage(Stage.ANSWER) as done, bundle_pipeline(self.settings, self.bundle, store) as pipeline:
                policy = fit_answer_policy(self.settings, answered, pipeline=pipeline)
                decision, scores = policy.policy.fit["decision"], policy.scores
                figure = f"{decision['says']}: token F1 {scores['answer_f1']:.3f} on {scores['questions']} questions"
                done(Outcome.FITTED if decision["verdict"] == Verdict.FITTED.value else Outcome.DEFAULT, figure)
        else:
            self.progress.skip(Stage.ANSWER, Outcome.SKIPPED, 'no question carries a reference "answer"')
        with bundle_pipeline(self.settings, self.bundle, store) as pipeline:  # after the policy: "not covered" reads its answer
            with self.progress.stage(Stage.SPLIT) as done:
                split = fit_split_on(self.settings, questions.val, pipeline)
                if split is None:
                    done(Outcome.SKIPPED, "no held-out question with gold passages")
                else:
                    m = split["on_fit_questions"]["all"]
                    figure = f"{split['decision']}: hit by product {m['hit_by_product']:.3f}, {m['mean_groups']:.2f} products a question"
                    done(Outcome.FITTED if split["serves_fitted"] else Outcome.DEFAULT, figure)
            with self.progress.stage(Stage.NOT_COVERED) as done:
                fit = not_covered_on(self.settings, questions.val, questions.known, pipeline)
                if fit is None:
                    done(Outcome.SKIPPED, "fewer than 2 held-out in-scope questions")
                else:
                    h = fit["heldout"]
                    figures = (
                        f": held out in-scope refused {h['false_refusal_rate']:.3f}, out-of-scope refused {h['abstention_rate']:.3f}"
                        if "false_refusal_rate" in h
                        else ""
                    )
                    done(Outcome.FITTED if fit["serves_fitted"] else Outcome.DEFAULT, f"{fit['decision']}{figures}")
        self.fresh[Stage.NOT_COVERED.value] = {"fingerprint": fp, "version": self.bundle.router}

    # flow ----------------------------------------------------------------------
    def _checked(self, catalogue: Catalogue) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
        """The in-scope and out-of-scope questions of the inputs, without the labels ``catalogue`` does not hold
        (refused unless ``lenient``: then each is said and left out)."""
        groups = [check_labels(load_files(files), catalogue, lenient=True) for files in (self.inputs.queries, self.inputs.out_of_scope)]
        problems = [p for g in groups for p in g.problems]
        if problems and not self.options.lenient:
            raise unknown_labels(problems, catalogue)
        for problem in problems:
            self.progress.say(f"warning: {problem} (left out)")
        return groups[0].queries, groups[1].queries

    @cached_property
    def index_products(self) -> dict[str, str]:
        """The product of every passage of the index the refresh starts from (doc_id -> product)."""
        from indexes.rebuild import index_store

        assert self.start.index is not None
        with index_store(self.settings, self.start.index) as store:
            return {p.doc_id: d for d in store.domains() for p in store.iter_passages(d)}

    def _feedback(self) -> RefreshFeedback:
        """What the home's feedback adds to the input files' questions (none with ``--no-feedback``)."""
        from service.feedback.store import normalise

        if not self.options.feedback:
            return RefreshFeedback()
        in_files = {normalise(q.query) for q in load_files([*self.inputs.queries, *self.inputs.out_of_scope])}
        return read_feedback(self.settings, lambda: self.index_products, in_files)

    def questions(self) -> Questions:
        """The questions flow's labelled questions (the files' and the feedback's), checked against the index,
        split for the router."""
        from training.router_data import stratified_split

        assert self.bundle.index is not None
        domains = self.registry.manifest("index", self.bundle.index).get("domains") or {}
        labelled, oos = self._checked(Catalogue.of("the index", domains, self.index_products))
        labelled, oos = [*labelled, *self.feedback.queries], [*oos, *self.feedback.out_of_scope]
        if not labelled:
            raise ValueError("the questions flow needs labelled questions (--queries, or passages confirmed by feedback)")
        train, val = stratified_split(labelled, self.val_fraction, seed=self.options.seed)
        return Questions(train, val + oos, labelled, self.inputs_fingerprint)

    def run(self) -> RefreshReport:
        """Every stage, then one activation of the bundle (module doc)."""
        from indexes.rebuild import index_store
        from training.router import RouterConfig

        t0 = time.perf_counter()
        data = None
        if self.inputs.flow is Flow.CORPUS:
            data = self.data()
            retriever = self.retriever(data)
            self.bundle = self.bundle.with_version("retriever", retriever).with_version("index", self.index(retriever))
            questions = router_sets_from_data(data, synthetic_per_domain=RouterConfig().synthetic_per_domain, seed=self.options.seed)
            questions.answered = [q for q in load_files(self.inputs.queries) if q.answer]
        else:
            questions = self.questions()
        assert self.bundle.index is not None
        with index_store(self.settings, self.bundle.index) as store:
            router, router_is_new = self.router(questions, store)
            self.bundle = self.bundle.with_version("router", router)
            self.bundle = self.bundle.with_version("reranker", self.reranker(data, store))
            self.decisions(questions, store, router_is_new)
        changed = self.registry.activate_many(self.bundle, expect=self.start)  # every kind at once: the previous bundle serves until here
        for stage, entry in self.fresh.items():
            self.record.stages[stage] = entry
        self.record.inputs, self.record.bundle = self.inputs, self.bundle.as_dict()
        self.record.feedback = {**self.feedback.counts(), "fingerprint": None if self.feedback.empty else self.feedback.fingerprint()}
        self.record.save(self.registry)
        return RefreshReport(self.progress.results, self.bundle, list(changed), self.inputs, round(time.perf_counter() - t0, 1), self.feedback)


def _retriever_figure(metrics: dict[str, Any]) -> str:
    """The retriever's key figure: Acc@1 on its validation pool, base -> fine-tuned."""
    tuned, base = metrics.get("fine_tuned") or {}, metrics.get("base") or {}
    if "acc@1" not in tuned:
        return ""
    return f"validation Acc@1 {base.get('acc@1', float('nan')):.3f} -> {tuned['acc@1']:.3f}"


def _router_figure(manifest: dict[str, Any]) -> str:
    """The router's key figure: held-out top-1 routing accuracy."""
    metrics = manifest.get("metrics") or {}
    top1 = (metrics.get("validation") or {}).get("top1_accuracy")
    return f"held-out top-1 routing {top1:.3f} ({metrics.get('held_out')})" if top1 is not None else ""


def refresh(
    settings: Settings, inputs: RefreshInputs, options: RefreshOptions, *, say: Callable[[str], None] = log.info, stop: StopFlag | None = None
) -> RefreshReport:
    """Refresh every fitted part of ``settings``' home from ``inputs`` (none: the last refresh's) and activate them
    together (module doc)."""
    return Refresh(settings, inputs, options, say, stop).run()
