"""Loading a :class:`~service.pipeline.Pipeline` from a data home's active versions.

The factory sits one level above the pipeline (it imports the pipeline, never the other way round):
the active index version's store, the retriever it was embedded with, the active router and its
abstention model, and the configured LLM. ``indexes/`` and ``training/`` use :func:`load_encoder`
and :func:`index_encoder_backend` to embed with the same retriever the service answers with.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

from service.artifacts import ArtifactError, Bundle, Registry
from service.config import Settings
from service.feedback.review import labels
from service.feedback.store import FeedbackBounds, FeedbackStore
from service.generation.abstention import AbstentionModel, abstention_path, load_abstention
from service.generation.answer_policy import load_policy, policy_path
from service.generation.backends import open_llm
from service.generation.llm import LLM
from service.pipeline import Pipeline
from service.ranking.model import load_ranking, ranking_path
from service.reranking.loading import load_reranker
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, index_encoder_backend, load_encoder
from service.retrieval.lexical import LexicalIndex
from service.retrieval.store import Store, StoreBackend, StoreUnavailable
from service.retrieval.vocabulary import Vocabulary, everyday_words
from service.routing.router import HeadRouter, Router, RouterFormatError, UniformRouter
from service.routing.split import load_split, split_path

log = logging.getLogger("fedqa.pipeline")


def load_pipeline(
    settings: Settings,
    backend: StoreBackend | None = None,
    *,
    with_llm: bool = True,
    store: Store | None = None,
    bundle: Bundle | None = None,
) -> Pipeline:
    """Build the pipeline from the active versions in the data home (``bundle``: these versions instead, e.g. a
    refresh's before it activates them).

    The encoder is the retriever the active index was embedded with, so queries and passages
    always share one vector space. Raises StoreUnavailable when there is no index yet.
    ``store``: an already open store of the active index version, reused instead of opening it
    again (a reload that changes only the router; the embedded store opens a version once per process).
    """
    from service.compute import configure_threads

    configure_threads(settings.torch_threads)
    registry = Registry(settings.home_dir)
    bundle = bundle or registry.bundle()
    index_version, manifest = _index(settings, registry, bundle.index)
    warnings: list[str] = []
    encoder = _index_encoder(settings, registry, index_version, manifest, warnings)
    if store is None or store.version != index_version:
        backend = backend or open_backend(settings)
        store = backend.open(index_version, serving=True)  # leased on a shared store (indexes/prune.py keeps it)

    router_version = bundle.router
    try:
        router = _active_router(registry, router_version, encoder.version, store.domains(), warnings)
    except BaseException:
        store.close()  # a missing router file must not leave the index version locked
        raise
    llm, llm_error = _open_llm(settings, warnings) if with_llm else (None, None)
    abstention = _abstention(registry, router_version, index_version, router, warnings)
    reranker = load_reranker(registry, bundle.reranker, encoder.version, store.domains(), warnings, threads=settings.rerank_threads)
    policy = load_policy(policy_path(registry, router_version, index_version))
    if policy is None or not policy.serves:
        warnings.append("no answer policy fitted: extractive answers use FEDQA_EXTRACTIVE_* (fedqa train answer)")
    return Pipeline(
        settings,
        router=router,
        encoder=encoder,
        store=store,
        llm=llm,
        llm_error=llm_error,
        warnings=warnings,
        abstention=abstention,
        policy=policy,
        reranker=reranker,
        split=load_split(split_path(registry, router_version)) if isinstance(router, HeadRouter) else None,
        vocabulary=_vocabulary(registry, store),
        lexical=_lexical(registry, store, warnings) if settings.lexical != "off" else None,
        ranking=load_ranking(ranking_path(registry, router_version)) if isinstance(router, HeadRouter) else None,
    )


def learn_feedback(pipeline: Pipeline, settings: Settings) -> bool:
    """Serve the home's trusted feedback (its labelled questions, :func:`~service.feedback.review.labels` at
    FEDQA_FEEDBACK_MIN_KEYS) as the pipeline's known answers (:meth:`Pipeline.learn`): at a load of the service and after
    each feedback it stores. Returns whether they changed; a feedback file that cannot be read is logged and changes
    nothing."""
    try:
        votes = FeedbackStore(settings.feedback_path).votes(FeedbackBounds.of(settings))
    except sqlite3.Error as exc:
        log.warning("feedback not served: %s cannot be read (%s)", settings.feedback_path, exc)
        return False
    return pipeline.learn(labels(votes, settings.feedback_min_keys))


def _lexical(registry: Registry, store: Store, warnings: list[str]) -> LexicalIndex | None:
    """The index version's lexical index (fused while no fitted ranking serves: :attr:`RouterFitted.ranks`); a
    version built without one is served by its vectors alone (warned)."""
    index = LexicalIndex.load(registry.path("index", store.version))
    if index is None:
        warnings.append(f"index {store.version} has no lexical index: ranking by the vectors alone (re-ingest or 'fedqa index build' to add it)")
    return index


def _vocabulary(registry: Registry, store: Store) -> Vocabulary:
    """The index version's stored vocabulary; one built before vocabularies were stored (or counted by product) is
    counted from its passages. The everyday word list its evidence reads is loaded here, not by the first question."""
    everyday_words()
    stored = Vocabulary.load(registry.path("index", store.version))
    if stored is not None:
        return stored
    t0 = time.perf_counter()
    counted = Vocabulary.of(p for d in store.domains() for p in store.iter_passages(d))
    log.info(
        "index %s has no stored vocabulary by product: counted from its %d passages in %.1f s",
        store.version,
        counted.passages,
        time.perf_counter() - t0,
    )
    return counted


def _index(settings: Settings, registry: Registry, index_version: str | None) -> tuple[str, dict[str, Any]]:
    """The index version and its manifest; StoreUnavailable when there is none (or it cannot be read)."""
    if not index_version:
        raise StoreUnavailable(f"no index in {settings.home_dir}: run 'fedqa ingest PATH' (or 'fedqa demo') first")
    try:
        return index_version, registry.manifest("index", index_version)
    except ArtifactError as exc:
        raise StoreUnavailable(str(exc)) from exc


def _index_encoder(settings: Settings, registry: Registry, index_version: str, manifest: dict[str, Any], warnings: list[str]) -> Encoder:
    """The encoder of the index's retriever on the runtime its passages were embedded with (warned when it differs)."""
    embedded_with = index_encoder_backend(manifest)
    encoder = load_encoder(settings, registry, manifest.get("retriever"), backend=embedded_with, calibration=manifest.get("encoder_calibration"))
    if encoder.backend.value != embedded_with:
        warnings.append(
            f"queries are embedded with {encoder.backend.value} but index {index_version}'s passages with "
            f"{embedded_with} ({encoder.backend_error}): rebuild the index (fedqa index build)"
        )
        log.warning(warnings[-1])
    elif encoder.backend.value != settings.encoder_backend:
        log.warning(
            "FEDQA_ENCODER_BACKEND=%s but index %s was embedded with %s: queries use %s (rebuild the index to switch)",
            settings.encoder_backend,
            index_version,
            encoder.backend.value,
            encoder.backend.value,
        )
    return encoder


def _active_router(registry: Registry, router_version: str | None, retriever: str, domains: list[str], warnings: list[str]) -> Router:
    """The active router version, or the uniform router (with a warning) when none is trained."""
    if router_version:
        return load_router(registry, router_version, retriever, domains, warnings)
    warnings.append("no trained router: every domain is searched (fedqa train router --data DIR)")
    return UniformRouter(domains)


def _open_llm(settings: Settings, warnings: list[str]) -> tuple[LLM | None, str | None]:
    """The configured LLM, or (None, why) when it cannot start: a missing model must not stop retrieval from serving."""
    try:
        return open_llm(settings), None
    except Exception as exc:  # logged, warned and shown as the answers' error
        llm_error = f"LLM backend could not start: {exc}"
        log.error(llm_error)
        warnings.append(llm_error)
        return None, llm_error


def _abstention(registry: Registry, router_version: str | None, index_version: str, router: Router, warnings: list[str]) -> AbstentionModel | None:
    """The abstention model fitted for this router and index (None, with a warning, when there is none)."""
    abstention = load_abstention(abstention_path(registry, router_version, index_version))
    if abstention is not None and router_version and isinstance(router, UniformRouter):
        abstention = None  # fitted on the probabilities of a router that cannot serve this index
    if abstention is None:
        warnings.append("no abstention model fitted: every question is answered (fedqa train abstention)")
    elif abstention.stale:
        warnings.append(
            f'"not covered" ({abstention.name}) was fitted before everyday words that no passage holds were left out of '
            "its evidence, and decides on shifted figures until it is fitted again: fedqa refresh (fedqa ingest on a home "
            "without labelled questions)"
        )
        log.warning(warnings[-1])
    elif abstention.unasked:
        warnings.append(
            f'"not covered" ({abstention.name}) was fitted before the questions it is fitted on were stored with it: a '
            'curator\'s "not covered" verdict is refused at once only once it is fitted again: fedqa refresh (fedqa ingest '
            "on a home without labelled questions)"
        )
        log.warning(warnings[-1])
    return abstention


def load_router(registry: Registry, version: str, retriever: str, domains: list[str], warnings: list[str]) -> Router:
    """The router version, or the uniform stand-in (with a warning) when it cannot read this index's vectors:
    a BERT router of an earlier release, or a head trained on another retriever's vectors."""
    try:
        router = HeadRouter.load(registry.path("router", version), version=version)
    except RouterFormatError as exc:
        warnings.append(f"{exc}; searching every domain until then")
        return UniformRouter(domains)
    if router.retriever is not None and router.retriever != retriever:
        warnings.append(
            f"router {version} was trained on retriever {router.retriever}'s vectors but the index uses {retriever}; "
            "searching every domain until the router is retrained (fedqa train router)"
        )
        return UniformRouter(domains)
    return router
