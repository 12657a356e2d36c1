"""The answering pipeline: route -> gate -> embed -> federated search -> answer (:mod:`service.generation.answer`).

Plain objects and functions, used alike by the HTTP API, the CLI, evaluation and tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from service.artifacts import ArtifactError, Registry
from service.config import Settings
from service.generation.abstention import AbstentionModel, abstention_path, load_abstention
from service.generation.answer import Answer, Answerer, AnswerMode
from service.generation.answer_policy import AnswerPolicy, load_policy, policy_path
from service.generation.backends import open_llm
from service.generation.extractive import shared_vectors
from service.generation.llm import LLM
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, model_fingerprint, packaged_minilm_path
from service.retrieval.federated import merge, search_domains
from service.retrieval.passage import RankedHit
from service.retrieval.store import Store, StoreBackend, StoreUnavailable
from service.retrieval.strategies import DEFAULT_STRATEGY, LLMDomainSelector, Selection, StrategyName, describe_domains, select
from service.routing.gate import GateMode
from service.routing.router import HeadRouter, Router, RouterFormatError, UniformRouter
from service.schemas import AnswerConfidence, AskRequest, AskResponse, Routing, Source

log = logging.getLogger("fedqa.pipeline")


class RequestError(ValueError):
    """A request that is well-formed JSON but asks for something out of range (HTTP 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Prepared:
    """What every strategy shares for one query: router probabilities and the query vector."""

    probs: dict[str, float]
    vector: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Retrieval:
    """The retrieval half of an answer."""

    query: str
    routing: Routing
    hits: list[RankedHit]
    timings_ms: dict[str, float] = field(default_factory=dict)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


class Pipeline:
    """Everything needed to answer: router, encoder, one index version's store, an LLM (optional)."""

    def __init__(
        self,
        settings: Settings,
        *,
        router: Router,
        encoder: Encoder,
        store: Store,
        llm: LLM | None = None,
        llm_error: str | None = None,
        warnings: list[str] | None = None,
        abstention: AbstentionModel | None = None,
        policy: AnswerPolicy | None = None,
    ) -> None:
        self._settings = settings
        self.encoder = encoder
        self.store = store
        self.llm_error = llm_error
        self.warnings = list(warnings or [])
        self.domains = store.domains()
        if not self.domains:
            raise StoreUnavailable(f"index {store.version} has no domains")
        if set(router.domains) != set(self.domains):
            self.warnings.append(
                f"router domains {sorted(router.domains)} differ from the index's {self.domains}; "
                "searching every domain until the router is retrained (fedqa train router)"
            )
            router = UniformRouter(self.domains)
            abstention = None  # fitted for the router that is not used
        self.router = router
        self.abstention = abstention
        self.answerer = Answerer(settings, encoder, llm=llm, llm_error=llm_error, abstention=abstention,
                                 vectors=shared_vectors(encoder, store.version), policy=policy)
        self._closed = threading.Event()
        self._warm_sentences()
        self._router_index = [router.domains.index(d) for d in self.domains]
        self._pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(self.domains))), thread_name_prefix="fedqa-search")
        self._descriptions: dict[str, str] | None = None
        self._descriptions_lock = threading.Lock()

    # ------------------------------------------------------------------ info
    @property
    def settings(self) -> Settings:
        """The settings (replacing them also updates the answering component's)."""
        return self._settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self._settings = value
        if hasattr(self, "answerer"):
            self.answerer.settings = value

    @property
    def llm(self) -> LLM | None:
        """The LLM the answering component generates with (None: extractive answers)."""
        return self.answerer.llm

    @llm.setter
    def llm(self, value: LLM | None) -> None:
        self.answerer.llm = value

    @property
    def versions(self) -> dict[str, str | None]:
        """Versions of everything that produced an answer."""
        return {
            "index": self.store.version,
            "router": self.router.version or "uniform",
            "retriever": self.encoder.version,
            "encoder_backend": self.encoder.backend.value,
            "llm": self.llm.name if self.llm else None,
            "store": self.store.backend,
        }

    def _warm_sentences(self) -> None:
        """Embed every passage's sentences in the background when the index is small (at most
        FEDQA_SENTENCE_VECTORS_PRECOMPUTE passages): extractive answers then embed nothing at request time."""
        vectors = self.answerer.extractor.vectors
        limit = self.settings.sentence_vectors_precompute
        if vectors is None or limit <= 0 or vectors.filling:
            return
        try:
            total = sum(self.store.count(d) for d in self.domains)
        except Exception:  # noqa: BLE001 - a store without counts is simply not pre-warmed
            return
        if total > min(limit, vectors.capacity):
            return
        vectors.filling = True

        def run() -> None:
            try:
                passages = [p for d in self.domains for p in self.store.iter_passages(d)]
                vectors.fill(passages, stop=self._closed.is_set)
            except Exception as exc:  # noqa: BLE001 - the answers then embed at request time
                log.warning("sentence vectors not pre-computed: %s", exc)

        self._warm_thread = threading.Thread(target=run, name="fedqa-sentence-vectors", daemon=True)
        self._warm_thread.start()

    def close(self, *, close_store: bool = True) -> None:
        """Release the search threads and (unless a newer pipeline shares it) the store.

        The background sentence embedding stops at its next batch and is waited for, so it neither reads a
        closed store nor is cut off inside the model runtime when the process exits."""
        self._closed.set()
        warm = getattr(self, "_warm_thread", None)
        if warm is not None and warm is not threading.current_thread():
            warm.join(timeout=60)
        self._pool.shutdown(wait=False)
        if close_store:
            self.store.close()

    # ------------------------------------------------------------- retrieval
    def validate(self, req: AskRequest) -> int:
        """Check limits that depend on settings; returns the effective top_k."""
        if len(req.query) > self.settings.max_query_chars:
            raise RequestError("query", f"query is {len(req.query)} characters; the limit is {self.settings.max_query_chars}")
        top_k = self.settings.default_top_k if req.top_k is None else req.top_k
        if not 1 <= top_k <= self.settings.max_top_k:
            raise RequestError("top_k", f"top_k must be between 1 and {self.settings.max_top_k}, got {top_k}")
        return top_k

    def probabilities(self, query: str) -> dict[str, float]:
        """Router probabilities p_j for the index's domains."""
        return self.prepare(query).probs

    def domain_descriptions(self) -> dict[str, str]:
        """A short description per domain for the lfs prompt: configured (FEDQA_DOMAIN_DESCRIPTIONS) or derived
        once from the domain's passage titles."""
        with self._descriptions_lock:
            if self._descriptions is None:
                configured = self.settings.domain_descriptions
                missing = [d for d in self.domains if d not in configured]
                derived = describe_domains({d: [p.title for p in self.store.iter_passages(d)] for d in missing})
                self._descriptions = {d: configured.get(d) or derived[d] for d in self.domains}
            return dict(self._descriptions)

    def lfs_selector(self) -> LLMDomainSelector:
        """The LLM resource selector of the lfs strategy (its calls fail and are counted when no LLM is configured)."""
        return LLMDomainSelector(self.llm, self.domain_descriptions(), timeout_s=self.settings.llm_timeout_s)

    def prepare(self, query: str) -> Prepared:
        """The query vector (one encoder forward) and the router's probabilities read from it,
        shared by every strategy."""
        return self.prepare_many([query])[0]

    def prepare_many(self, queries: list[str]) -> list[Prepared]:
        """:meth:`prepare` for a batch of queries: one encoder pass, then the router head on its vectors."""
        if not queries:
            return []
        t0 = time.perf_counter()
        vectors = self.encoder.embed_queries(queries)
        t_embed = _ms(t0) / len(queries)
        t0 = time.perf_counter()
        p = self.router.predict_vectors(vectors)
        t_router = _ms(t0) / len(queries)
        return [
            Prepared(
                probs={d: float(p[k, i]) for d, i in zip(self.domains, self._router_index, strict=True)},
                vector=vectors[k],
                timings_ms={"router": round(t_router, 3), "embed": round(t_embed, 3)},
            )
            for k in range(len(queries))
        ]

    def retrieve(
        self,
        query: str,
        *,
        top_k: int,
        seed: int | None = None,
        gate_mode: GateMode | None = None,
        strategy: StrategyName | str = DEFAULT_STRATEGY,
        prepared: Prepared | None = None,
        domains: list[str] | None = None,
    ) -> Retrieval:
        """Route, choose the domains by ``strategy``, search them (top-k each) and merge.

        ``domains``: the caller's product filter: only these domains are searched, merged by raw s,
        and the routing says they were given (``given``), not predicted. See
        :mod:`service.retrieval.strategies` for the strategies.
        """
        t_all = time.perf_counter()
        strategy = StrategyName(strategy)
        prepared = prepared or self.prepare(query)
        timings: dict[str, float] = dict(prepared.timings_ms)
        probs = prepared.probs
        mode: GateMode = gate_mode or self.settings.gate_mode

        def search(ds, limit):  # noqa: ANN001, ANN202
            per, ms = search_domains(self.store, prepared.vector, list(ds), limit, self._pool)
            timings.update({f"search.{d}": round(v, 3) for d, v in ms.items()})
            return per

        t0 = time.perf_counter()
        if domains:
            selection = self._given(domains, probs)
        else:
            selection = select(
                strategy.value, probs, self.domains, tau0=self.settings.tau0, gate_mode=mode, rng=np.random.default_rng(seed),
                query=query, selector=self.lfs_selector if strategy.value == "lfs" else None, search=search, top_k=top_k,
                fitted=self.router.fitted,
            )
        timings["gate"] = _ms(t0)  # choosing the domains (for fused: with its evidence searches)

        t0 = time.perf_counter()
        per_domain = {d: h for d, h in (selection.hits or {}).items() if d in selection.weights}
        missing = [d for d in selection.active if d not in per_domain]
        if missing:
            per_domain.update(search(missing, top_k))
        hits = merge(per_domain, selection.weights, top_k)
        timings["search"] = _ms(t0)
        timings["retrieval"] = _ms(t_all)

        routing = Routing(
            probabilities={d: round(v, 6) for d, v in probs.items()},
            threshold=round(selection.threshold, 6),
            active_domains=selection.active,
            activation={d: round(a, 6) for d, a in selection.activation.items()},
            fallback=selection.fallback,
            mode=mode if strategy.value == "mkpqa" and not domains else "deterministic",
            router=self.router.version or "uniform",
            strategy=strategy,
            selector=selection.detail or None,
            given=bool(domains),
        )
        return Retrieval(query=query, routing=routing, hits=hits, timings_ms=timings)

    def _given(self, domains: list[str], probs: dict[str, float]) -> Selection:
        """The caller's product filter: exactly these domains, weight 1 (ranked by s)."""
        unknown = [d for d in domains if d not in self.domains]
        if unknown:
            raise RequestError("domains", f"unknown domain(s) {unknown}; this index has {self.domains}")
        chosen = list(dict.fromkeys(domains))
        return Selection("given", chosen, {d: 1.0 for d in chosen}, 0.0, {d: 1.0 if d in chosen else 0.0 for d in self.domains},
                         detail={"given": chosen})

    # ---------------------------------------------------------------- answer
    def answer_retrieval(
        self, ret: Retrieval, *, generate: bool = True, query_vector: np.ndarray | None = None,
        context_passages: int | None = None,
    ) -> Answer:
        """The :class:`Answer` for a retrieval (the path /ask, chat and evaluation share)."""
        return self.answerer.answer(ret.query, ret.hits, ret.routing.probabilities, generate=generate,
                                    query_vector=query_vector, context_passages=context_passages)

    def _response(self, ret: Retrieval, answer: Answer, strategy: StrategyName | str) -> AskResponse:
        return AskResponse(
            query=ret.query,
            answer=answer.text,
            answer_mode=answer.mode.value,
            citations=answer.citations,
            confidence=AnswerConfidence(**asdict(answer.confidence)) if answer.confidence else None,
            sources=[
                Source(
                    **h.passage.payload(),
                    score=round(h.score, 6),
                    domain_prob=round(h.domain_prob, 6),
                    unified_score=round(h.unified_score, 6),
                )
                for h in ret.hits
            ],
            routing=ret.routing,
            strategy=strategy,  # type: ignore[arg-type]
            timings_ms=ret.timings_ms,
            versions=self.versions,
            error=answer.error,
        )

    def _retrieve_request(self, req: AskRequest, query: str | None = None) -> tuple[Retrieval, Prepared]:
        top_k = self.validate(req)
        prepared = self.prepare(query or req.query)
        ret = self.retrieve(query or req.query, top_k=top_k, seed=req.seed, gate_mode=req.gate, strategy=req.strategy,
                            prepared=prepared, domains=req.domains)
        return ret, prepared

    def answer(self, req: AskRequest, *, retrieval_query: str | None = None) -> AskResponse:
        """Answer one request (non-streaming). ``retrieval_query``: route and search with this text instead of
        the question (a chat follow-up with its earlier turns); the answer is still to ``req.query``."""
        return _last_response(self.answer_stream(req, retrieval_query=retrieval_query, incremental=False))

    def answer_stream(
        self, req: AskRequest, *, retrieval_query: str | None = None, incremental: bool = True
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Answer as events: ``retrieval`` (routing and sources), ``token`` pieces (``reset``: drop the pieces so
        far, a rejected generation), then ``done`` (the full response)."""
        t_all = time.perf_counter()
        ret, prepared = self._retrieve_request(req, retrieval_query)
        yield "retrieval", {"routing": ret.routing.model_dump(),
                            "sources": [s.model_dump() for s in self._response(ret, Answer(None, AnswerMode.RETRIEVAL), req.strategy).sources]}
        final: Answer | None = None
        for item in self.answerer.stream(req.query, ret.hits, ret.routing.probabilities, generate=req.generate,
                                         query_vector=prepared.vector, incremental=incremental):
            if isinstance(item, Answer):
                final = item
            elif item.reset:
                yield "reset", {}
            elif item.text:
                yield "token", {"text": item.text}
        assert final is not None
        if req.generate:
            ret.timings_ms["generate"] = final.timings_ms["answer"]
        ret.timings_ms["total"] = _ms(t_all)
        resp = self._response(ret, final, req.strategy)
        resp.query = req.query
        yield "done", resp.model_dump(mode="json")


def _last_response(events: Iterator[tuple[str, dict[str, Any]]]) -> AskResponse:
    done = [data for name, data in events if name == "done"]
    return AskResponse.model_validate(done[-1])


def load_pipeline(
    settings: Settings, backend: StoreBackend | None = None, *, with_llm: bool = True, store: Store | None = None
) -> Pipeline:
    """Build the pipeline from the active versions in the data home.

    The encoder is the retriever the active index was embedded with, so queries and passages
    always share one vector space. Raises StoreUnavailable when there is no index yet.
    ``store``: an already open store of the active index version, reused instead of opening it
    again (a reload that changes only the router; the embedded store opens a version once per process).
    """
    from service.compute import configure_threads

    configure_threads(settings.torch_threads)
    registry = Registry(settings.home_dir)
    index_version = registry.active()["index"]
    if not index_version:
        raise StoreUnavailable(f"no index in {settings.home_dir}: run 'fedqa ingest PATH' (or 'fedqa demo') first")
    try:
        manifest = registry.manifest("index", index_version)
    except ArtifactError as exc:
        raise StoreUnavailable(str(exc)) from exc
    encoder = load_encoder(settings, registry, manifest.get("retriever"), backend=index_encoder_backend(manifest))
    warnings: list[str] = []
    if encoder.backend.value != index_encoder_backend(manifest):
        warnings.append(
            f"queries are embedded with {encoder.backend.value} but index {index_version}'s passages with "
            f"{index_encoder_backend(manifest)} ({encoder.backend_error}): rebuild the index (fedqa index build)"
        )
        log.warning(warnings[-1])
    elif encoder.backend.value != settings.encoder_backend:
        log.warning(
            "FEDQA_ENCODER_BACKEND=%s but index %s was embedded with %s: queries use %s (rebuild the index to switch)",
            settings.encoder_backend, index_version, encoder.backend.value, encoder.backend.value,
        )
    if store is None or store.version != index_version:
        backend = backend or open_backend(settings)
        store = backend.open(index_version)

    router_version = registry.active()["router"]
    router: Router
    try:
        if router_version:
            router = load_router(registry, router_version, encoder.version, store.domains(), warnings)
        else:
            warnings.append("no trained router: every domain is searched (fedqa train router --data DIR)")
            router = UniformRouter(store.domains())
    except BaseException:
        store.close()  # a missing router file must not leave the index version locked
        raise

    llm, llm_error = None, None
    if with_llm:
        try:
            llm = open_llm(settings)
        except Exception as exc:  # a missing model must not stop retrieval from serving
            llm_error = f"LLM backend could not start: {exc}"
            log.error(llm_error)
            warnings.append(llm_error)
    abstention = load_abstention(abstention_path(registry, router_version, index_version))
    if abstention is not None and router_version and isinstance(router, UniformRouter):
        abstention = None  # fitted on the probabilities of a router that cannot serve this index
    if abstention is None:
        warnings.append("no abstention model fitted: every question is answered (fedqa train abstention)")
    policy = load_policy(policy_path(registry, router_version, index_version))
    if policy is None:
        warnings.append("no answer policy fitted: extractive answers use FEDQA_EXTRACTIVE_* (fedqa train answer)")
    return Pipeline(settings, router=router, encoder=encoder, store=store, llm=llm, llm_error=llm_error,
                    warnings=warnings, abstention=abstention, policy=policy)


def load_encoder(
    settings: Settings, registry: Registry, retriever_version: str | None, *, backend: str | None = None
) -> Encoder:
    """The bi-encoder of a retriever version (None: the configured or shipped base model).

    ``backend``: the runtime (default FEDQA_ENCODER_BACKEND). A trained version's ONNX export lies in
    its own folder (``onnx/``); the base model's in the data home's ``cache/onnx/<fingerprint>``.
    """
    backend = backend or settings.encoder_backend
    common: dict[str, Any] = {"backend": backend, "cache_size": settings.encoder_cache_size, "threads": settings.torch_threads}
    if retriever_version and retriever_version != "base":
        path = registry.path("retriever", retriever_version)
        return Encoder(path, version=retriever_version, onnx_dir=path / "onnx", **common)
    path = Path(settings.encoder_model) if settings.encoder_model else packaged_minilm_path()
    onnx_dir = settings.home_dir / "cache" / "onnx" / model_fingerprint(path)
    return Encoder(path, version="base", onnx_dir=onnx_dir, **common)


def index_encoder_backend(manifest: dict) -> str:
    """The runtime an index's passages were embedded with (indexes from before it was recorded: torch)."""
    return manifest.get("encoder_backend", "torch")


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
