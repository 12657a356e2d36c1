"""The answering pipeline: route -> gate -> embed -> federated search -> generate.

Plain objects and functions, used alike by the HTTP API, the CLI, evaluation and tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from service.artifacts import ArtifactError, Registry
from service.config import Settings
from service.generation.extractive import extractive_answer
from service.generation.llm import LLM, LLMError, open_llm
from service.generation.prompt import STOP, attribute, build_prompt, citations, drop_bad_citations, grounding
from service.retrieval.backends import open_backend
from service.retrieval.encoder import Encoder, model_fingerprint, packaged_minilm_path
from service.retrieval.federated import merge, search_domains
from service.retrieval.passage import RankedHit
from service.retrieval.store import Store, StoreBackend, StoreUnavailable
from service.retrieval.strategies import DEFAULT_STRATEGY, LLMDomainSelector, Selection, StrategyName, describe_domains, select
from service.routing.gate import GateMode
from service.routing.router import HeadRouter, Router, RouterFormatError, UniformRouter
from service.schemas import AskRequest, AskResponse, Routing, Source

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
    ) -> None:
        self.settings = settings
        self.encoder = encoder
        self.store = store
        self.llm = llm
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
        self.router = router
        self._router_index = [router.domains.index(d) for d in self.domains]
        self._pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(self.domains))), thread_name_prefix="fedqa-search")
        self._descriptions: dict[str, str] | None = None
        self._descriptions_lock = threading.Lock()

    # ------------------------------------------------------------------ info
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

    def close(self, *, close_store: bool = True) -> None:
        """Release the search threads and (unless a newer pipeline shares it) the store."""
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
                strategy, probs, self.domains, tau0=self.settings.tau0, gate_mode=mode, rng=np.random.default_rng(seed),
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

    # ------------------------------------------------------------ generation
    def _prompt(self, ret: Retrieval, context_passages: int | None = None) -> tuple[str, list[RankedHit]]:
        context = ret.hits[: context_passages or self.settings.llm_context_passages]
        return build_prompt(ret.query, context, passage_words=self.settings.llm_passage_words), context

    def _finish_generated(self, text: str, context: list[RankedHit]) -> str:
        answer = drop_bad_citations(text, len(context))
        if answer and not citations(answer, len(context)):
            answer = attribute(answer, context)
        return answer

    def _fallback(self, ret: Retrieval, error: str | None) -> tuple[str | None, str, str | None]:
        if self.settings.answer_fallback == "extractive":
            return extractive_answer(ret.query, ret.hits), "extractive", error
        return None, "none", error

    def generate(self, ret: Retrieval, *, context_passages: int | None = None) -> tuple[str | None, str, str | None]:
        """(answer, answer_mode, error) for a retrieval; never raises for LLM faults.

        ``context_passages``: passages in the prompt (default FEDQA_LLM_CONTEXT_PASSAGES; evaluation uses top-k)."""
        if not ret.hits:
            return None, "none", "no passage matched the query"
        if self.llm is None:
            if self.llm_error:
                return self._fallback(ret, self.llm_error)
            return extractive_answer(ret.query, ret.hits), "extractive", None
        prompt, context = self._prompt(ret, context_passages)
        try:
            text = self.llm.complete(
                prompt, max_tokens=self.settings.llm_max_tokens, stop=STOP, timeout_s=self.settings.llm_timeout_s
            )
        except LLMError as exc:
            log.warning("LLM failed: %s", exc)
            return self._fallback(ret, f"generation failed: {exc}")
        return self._accept(ret, text, context)

    def _accept(self, ret: Retrieval, text: str, context: list[RankedHit]) -> tuple[str | None, str, str | None]:
        """(answer, answer_mode, error) for a completion: cleaned and cited, or the fallback when it is
        empty or too little of it is supported by its sources."""
        answer = self._finish_generated(text, context)
        if not answer:
            return self._fallback(ret, "the LLM returned an empty answer")
        g = grounding(answer, context)
        if g < self.settings.min_grounding:
            return self._fallback(
                ret,
                f"the generated answer was not supported by the sources (grounding {g:.2f} < "
                f"{self.settings.min_grounding:.2f}); it was replaced",
            )
        return answer, "generative", None

    # ---------------------------------------------------------------- answer
    def _response(self, ret: Retrieval, answer: str | None, mode: str, error: str | None, strategy: str) -> AskResponse:
        return AskResponse(
            query=ret.query,
            answer=answer,
            answer_mode=mode,  # type: ignore[arg-type]
            citations=citations(answer, len(ret.hits)) if answer else [],
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
            error=error,
        )

    def answer(self, req: AskRequest) -> AskResponse:
        """Answer one request (non-streaming)."""
        t_all = time.perf_counter()
        top_k = self.validate(req)
        ret = self.retrieve(req.query, top_k=top_k, seed=req.seed, gate_mode=req.gate, strategy=req.strategy, domains=req.domains)
        if req.generate:
            t0 = time.perf_counter()
            answer, mode, error = self.generate(ret)
            ret.timings_ms["generate"] = _ms(t0)
        else:
            answer, mode, error = None, "retrieval", None
        ret.timings_ms["total"] = _ms(t_all)
        return self._response(ret, answer, mode, error, req.strategy)

    def answer_stream(self, req: AskRequest) -> Iterator[tuple[str, dict[str, Any]]]:
        """Answer as events: ``retrieval`` (routing and sources), ``token`` pieces, then ``done`` (the full response)."""
        t_all = time.perf_counter()
        top_k = self.validate(req)
        ret = self.retrieve(req.query, top_k=top_k, seed=req.seed, gate_mode=req.gate, strategy=req.strategy, domains=req.domains)
        head = self._response(ret, None, "retrieval", None, req.strategy)
        yield "retrieval", {"routing": head.routing.model_dump(), "sources": [s.model_dump() for s in head.sources]}
        answer: str | None
        error: str | None = None
        t0 = time.perf_counter()
        if not req.generate:
            answer, mode = None, "retrieval"
        elif self.llm is None or not ret.hits:
            answer, mode, error = self.generate(ret)
            if answer:
                yield "token", {"text": answer}
        else:
            prompt, context = self._prompt(ret)
            pieces: list[str] = []
            try:
                for piece in self.llm.stream(
                    prompt, max_tokens=self.settings.llm_max_tokens, stop=STOP, timeout_s=self.settings.llm_timeout_s
                ):
                    pieces.append(piece)
                    yield "token", {"text": piece}
                answer, mode, error = self._accept(ret, "".join(pieces), context)
            except LLMError as exc:
                answer, mode, error = self._fallback(ret, f"generation failed: {exc}")
        ret.timings_ms["generate"] = _ms(t0)
        ret.timings_ms["total"] = _ms(t_all)
        yield "done", self._response(ret, answer, mode, error, req.strategy).model_dump()


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
    return Pipeline(settings, router=router, encoder=encoder, store=store, llm=llm, llm_error=llm_error, warnings=warnings)


def load_encoder(
    settings: Settings, registry: Registry, retriever_version: str | None, *, backend: str | None = None
) -> Encoder:
    """The bi-encoder of a retriever version (None: the configured or shipped base model).

    ``backend``: the runtime (default FEDQA_ENCODER_BACKEND). A trained version's ONNX export lies in
    its own folder (``onnx/``); the base model's in the data home's ``cache/onnx/<fingerprint>``.
    """
    backend = backend or settings.encoder_backend
    common = {"backend": backend, "cache_size": settings.encoder_cache_size, "threads": settings.torch_threads}
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
