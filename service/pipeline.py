"""The answering pipeline: route -> gate -> embed -> federated search -> answer (:mod:`service.generation.answer`).

Plain objects and functions, used alike by the HTTP API, the CLI, evaluation and tests. A pipeline is
loaded from a data home's active versions by :func:`service.loading.load_pipeline`; one request's
path to its response is :mod:`service.ask`, which calls this module (never the other way).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.config import Settings
from service.feedback.review import FeedbackLabels, question_id
from service.feedback.store import normalise
from service.generation.abstention import AbstentionModel
from service.generation.answer import Answer, Answerer
from service.generation.answer_policy import AnswerPolicy
from service.generation.extractive import shared_vectors
from service.generation.llm import LLM
from service.ranking.features import Pool, candidate_pool, reranked
from service.ranking.model import RankingModel
from service.reranking.model import Reranker
from service.retrieval.encoder import Encoder
from service.retrieval.federated import Candidate, merge, search_domains, search_threads, with_passages
from service.retrieval.lexical import LexicalIndex, fused_lexical, search_lexical
from service.retrieval.page_prior import KnownAnswers, PagePrior, PriorBonus
from service.retrieval.passage import Hit, RankedHit, point_id
from service.retrieval.passage_cache import PassageCache
from service.retrieval.questions import joint_retrieval, questions
from service.retrieval.results import Prepared, ProductRetrieval, Retrieval
from service.retrieval.store import Store, StoreUnavailable
from service.retrieval.strategies import DEFAULT_STRATEGY, LLMDomainSelector, Selection, StrategyName, describe_domains, select
from service.retrieval.strategies.base import Search
from service.retrieval.strategies.given import select as select_given
from service.retrieval.vocabulary import Vocabulary
from service.routing.fitted import RouterFitted
from service.routing.gate import GateMode
from service.routing.router import Router, UniformRouter
from service.routing.split import SplitRule, best_score
from service.schemas import AskRequest, Routing
from service.scope import within
from service.text import split_questions

log = logging.getLogger("fedqa.pipeline")


class RequestError(ValueError):
    """A request that is well-formed JSON but asks for something out of range (HTTP 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


@dataclass(frozen=True)
class Merge:
    """The served merge's inputs for one question: each domain's hits, the strategy's weights, the router's p_j, the
    page prior's bonus and the search depth (what orders the default ranking)."""

    per_domain: dict[str, list[Hit]]
    weights: dict[str, float]
    probs: dict[str, float]
    bonus: PriorBonus | None
    search_k: int


def _confirmed_first(ranked: list[Candidate], confirmed: Sequence[str], top_k: int) -> tuple[list[Candidate], bool]:
    """``ranked`` with the candidates of the ``confirmed`` point ids first (their ranking's order), cut to ``top_k``; and
    whether any was found (a confirmed passage the search did not reach, or outside the products searched, is not added)."""
    first = [c for c in ranked if c.point_id in confirmed]
    return (first + [c for c in ranked if c.point_id not in confirmed])[:top_k], bool(first)


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
        reranker: Reranker | None = None,
        split: SplitRule | None = None,
        vocabulary: Vocabulary | None = None,
        lexical: LexicalIndex | None = None,
        ranking: RankingModel | None = None,
    ) -> None:
        self._settings = settings
        self.reranker = reranker
        self.lexical = lexical  # BM25 per domain, fused with the vectors' ranking (lexical.fused_lexical: when)
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
            abstention = split = None  # fitted for the router that is not used
        self.router = router
        # the fitted ranking model ordering the default strategy's passages (None: the strategy's merge orders them)
        serving: dict[str, str | None] = {"index": store.version, "retriever": encoder.version, "router": router.version or "uniform"}
        serving["reranker"] = reranker.version if reranker is not None and settings.rerank == "on" else None
        self.ranking = ranking if ranking is not None and ranking.serves(serving) else None
        self._stored_ranking, self._serving = ranking, serving
        self.split = split  # when an answer covers several products (None: always one)
        self.abstention = abstention
        self.answerer = Answerer(
            settings,
            encoder,
            llm=llm,
            llm_error=llm_error,
            abstention=abstention,
            vectors=shared_vectors(encoder, store.version),
            policy=policy,
            vocabulary=vocabulary,
        )
        self._router_index = [router.domains.index(d) for d in self.domains]
        self._start(settings, store)
        self._learnt()
        self._owner = True  # False: a copy (with_llm), whose threads and store are this pipeline's

    def _learnt(self) -> None:
        """What the pipeline learns as it serves: the products' descriptions, and trusted feedback's known answers."""
        self._descriptions: dict[str, str] | None = None
        self._descriptions_lock = threading.Lock()
        self._known = KnownAnswers()  # trusted feedback served as known answers (learn)
        self._outside: dict[str, str] = {}  # trusted feedback's "not covered" questions (learn): qid -> text
        self._outside_vectors: dict[str, np.ndarray] = {}
        self._scopes: dict[str, tuple[str, ...] | None] = {}  # qid -> where it counts (FeedbackLabels.scopes)
        self._domains: dict[str, frozenset[str]] = {}  # a labelled question's products
        self._served: tuple[PagePrior | None, KnownAnswers, PagePrior | None] | None = None  # page_prior's last: its inputs, itself
        self._learn_lock = threading.Lock()

    def _start(self, settings: Settings, store: Store) -> None:
        """The background work of a new pipeline: the answerer's sentence vectors, the passage cache (warmed from a
        local store), and the search threads."""
        self._closed = threading.Event()
        self._warm_thread = self.answerer.warm_up(store, self.domains, settings.sentence_vectors_precompute, self._closed)
        self.passage_cache = PassageCache(settings.passage_cache_size)
        if store.backend == "qdrant-edge":  # local reads, ~1 s for faq6; a server's collections fill the cache by reads
            self.passage_cache.warm(store, self.domains)
        threads = search_threads(settings, store, len(self.domains))
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fedqa-search")
        self._search_pool = self._pool if threads > 1 else None  # None: one domain after another, in this thread

    @property
    def settings(self) -> Settings:
        """The settings the pipeline was composed with."""
        return self._settings

    @property
    def llm(self) -> LLM | None:
        """The LLM the answering component generates with (None: extractive answers)."""
        return self.answerer.llm

    def with_llm(self, llm: LLM | None, *, settings: Settings | None = None) -> Pipeline:
        """A copy that answers with ``llm`` (and ``settings``, when given), sharing the router, encoder, store, caches
        and search threads with this pipeline, which is left as it is; the copy's :meth:`close` releases nothing."""
        clone = copy.copy(self)
        clone._settings = settings or self._settings
        clone.answerer = self.answerer.with_llm(llm, settings=clone._settings)
        clone._owner = False
        return clone

    @property
    def ranking_says(self) -> str | None:
        """Whether the ranking model stored beside the router orders the default strategy's passages or the default
        ranking does, and why (None: none stored; :meth:`~service.ranking.model.RankingModel.says`)."""
        model = self.ranking or self._stored_ranking
        return model.says(self._serving) if model is not None else None

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
            "reranker": self.reranker.version if self.reranker else None,
        }

    def settle(self) -> None:
        """Wait for the sentence embedding started in the background at load (if any) to end: a fit then reads the
        sentence vectors a served answer reads whatever the threads' timing (an int8 encoder's vectors vary slightly
        with the batch they were computed in)."""
        self._join_warm(None)

    def _join_warm(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds (None: until it ends) for the background sentence embedding, if any."""
        if self._warm_thread is not None and self._warm_thread is not threading.current_thread():
            self._warm_thread.join(timeout)

    def close(self, *, close_store: bool = True) -> None:
        """Release the search threads and (unless a newer pipeline shares it) the store.

        The background sentence embedding stops at its next batch and is waited for, so it neither reads a
        closed store nor is cut off inside the model runtime when the process exits. A copy made by
        :meth:`with_llm` releases nothing."""
        if not self._owner:
            return
        self._closed.set()
        self._join_warm(60)
        self._pool.shutdown(wait=False)
        if close_store:
            self.store.close()

    # ------------------------------------------------------------- feedback
    @property
    def page_prior(self) -> PagePrior | None:
        """The page prior served: the router's fitted one counting trusted feedback's questions as well (:meth:`learn`);
        with feedback and no fitted prior, one of weight and penalty 0 (its known answers are features of a ranking
        model's pools, and change no other ranking)."""
        base, known, served = self.router.fitted.page_prior, self._known, self._served
        if served is not None and served[0] is base and served[1] is known:
            return served[2]
        prior = base
        if known.answers:
            prior = (base or PagePrior(weight=0.0, depth=1, members={}, answers={})).with_known(known)
        self._served = (base, known, prior)  # one assignment: a reader sees the old or the new triple
        return prior

    def learn(self, labels: FeedbackLabels) -> bool:
        """Serve trusted feedback (:func:`service.feedback.review.labels`) from now on, in place of what was learnt
        before: each labelled question's gold passages that the index has (in its domains) as the page prior's known
        answers, and every labelled and "not covered" question as a known in-scope or out-of-scope question of the
        "not covered" evidence (:meth:`~service.generation.asked.AskedQuestions.with_feedback`, within its scope), with
        its vector from this pipeline's encoder. Returns whether what is served changed (False: the same questions and
        passages as before, nothing re-embedded)."""
        with self._learn_lock:
            answers: dict[str, tuple[str, ...]] = {}
            texts: dict[str, str] = {}
            for q in labels.queries:
                pids = [point_id(g) for g in q.gold_doc_ids]
                found = {pid for d in q.domains if d in self.domains for pid in self.passage_cache.passages(self.store, d, pids)}
                ids = tuple(g for g in q.gold_doc_ids if point_id(g) in found)
                if ids:
                    answers[q.qid], texts[q.qid] = ids, q.query
            outside = {q.qid: q.query for q in labels.out_of_scope}
            old = self._known
            if answers == dict(old.answers) and texts == dict(old.texts) and outside == self._outside and labels.scopes == self._scopes:
                return False
            vectors = self._embedded({**texts, **outside}, {**old.texts, **self._outside}, {**old.questions, **self._outside_vectors})
            self._known = KnownAnswers(answers, texts, {q: vectors[q] for q in texts})
            self._domains = {q.qid: frozenset(q.domains) for q in labels.queries}
            self._outside, self._scopes, self._outside_vectors = outside, dict(labels.scopes), {q: vectors[q] for q in outside}
            self._ask_known()
            return True

    def _embedded(self, texts: dict[str, str], before: dict[str, str], vectors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each question's query vector: the one embedded before for the same text, else embedded now."""
        kept = {q: vectors[q] for q, t in texts.items() if before.get(q) == t and q in vectors}
        new = [q for q in texts if q not in kept]
        if new:
            kept.update(zip(new, self.encoder.embed_queries([texts[q] for q in new]), strict=True))
        return kept

    def _ask_known(self) -> None:
        """The answerer's known questions: the abstention model's with the feedback learnt (:meth:`learn`)."""
        fitted = self.abstention.asked if self.abstention is not None else None
        if fitted is None:
            return
        known, dim = self._known, fitted.dim

        def scope(qid: str) -> frozenset[str] | None:
            products = self._scopes.get(qid)
            return frozenset(products) if products is not None else None

        inside = [q for q in known.texts if q in known.questions]
        self.answerer.asked = fitted.with_feedback(
            np.array([known.questions[q] for q in inside], dtype=np.float32).reshape(-1, dim),
            [scope(q) for q in inside],
            [self._domains.get(q, frozenset()) for q in inside],
            np.array([self._outside_vectors[q] for q in self._outside], dtype=np.float32).reshape(-1, dim),
            [scope(q) for q in self._outside],
        )

    def confirmed(self, query: str) -> tuple[str, ...]:
        """The passages trusted feedback confirmed for ``query`` asked again (the same question as feedback counts it,
        :func:`~service.feedback.store.normalise`), as point ids; () for any other question."""
        known = self._known
        qid = question_id(normalise(query)) if known.answers else None
        return tuple(point_id(d) for d in known.answers.get(qid, ())) if qid is not None else ()

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
        """A short description per domain for the lfs prompt: FEDQA_DOMAIN_DESCRIPTIONS, or its passage titles'."""
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
        question: str | None = None,
        rerank: bool = True,
        allowed: frozenset[str] | None = None,
        pool_depth: int | None = None,
        rerank_depth: int | None = None,
    ) -> Retrieval:
        """Route, choose the domains by ``strategy``, search them (top-k each) and merge; within ``allowed`` (:mod:`service.scope`).

        ``domains``: the caller's product filter: only these domains are searched, merged by raw s,
        and the routing says they were given (``given``), not predicted. See
        :mod:`service.retrieval.strategies` for the strategies. The message is split into its questions here, once
        (``Retrieval.parts``, with every strategy); with the default strategy (no ``domains``) each is retrieved on
        its own (:mod:`service.retrieval.questions`). ``question``: the message the answer is to when ``query`` is
        another text (a chat follow-up with its earlier turns), which is searched whole: its parts lean on each other.
        ``rerank``: with a reranker (and FEDQA_RERANK on) the merged top-N (its fitted depth) is reranked, then cut.
        With a ranking model (:attr:`ranking`) the default strategy's passages are ordered by its score over each
        question's candidate pool (:mod:`service.ranking`); ``pool_depth``: build the pools at that depth (a fit's
        candidates) whether or not a model serves; ``rerank_depth``: with a reranker (:attr:`pool_reranker`), its logit
        as a feature of the pools' top N by the default ranking (a fit's; a serving model reads its own N when its score
        reads the reranker, and then no reranking follows it). The pools built are in ``Retrieval.pools``.
        """
        strategy = StrategyName(strategy)
        kw: dict[str, Any] = {
            "seed": seed,
            "gate_mode": gate_mode,
            "strategy": strategy,
            "domains": domains,
            "rerank": rerank,
            "allowed": allowed,
            "pool_depth": pool_depth,
            "rerank_depth": rerank_depth,
        }
        message = query if question is None else question
        texts = split_questions(message)
        if len(texts) > 1 and question is None and strategy is DEFAULT_STRATEGY and not domains:
            return self._retrieve_questions(query, texts, top_k=top_k, **kw)
        ret = self._retrieve_one(query, top_k=top_k, prepared=prepared, **kw)
        ret.parts = questions(message, texts, ret.vector)
        return ret

    def _retrieve_one(
        self,
        query: str,
        *,
        top_k: int,
        seed: int | None,
        gate_mode: GateMode | None,
        strategy: StrategyName,
        prepared: Prepared | None,
        domains: list[str] | None,
        rerank: bool,
        allowed: frozenset[str] | None,
        pool_depth: int | None = None,
        rerank_depth: int | None = None,
    ) -> Retrieval:
        """:meth:`retrieve` of ``query`` searched as one text (its ``parts`` left to the caller)."""
        t_all = time.perf_counter()
        reranker = self.reranker if rerank and self.settings.rerank == "on" else None
        final_k, top_k = top_k, max(top_k, reranker.params.depth) if reranker else top_k
        prepared = prepared or self.prepare(query)
        served = self.page_prior
        prior = served if served is not None and served.active and (strategy is DEFAULT_STRATEGY or domains) else None  # not for the baselines
        bonus, search_k = (prior.bonus_for(prepared.vector), max(top_k, prior.depth)) if prior is not None else (None, top_k)
        pooled = strategy is DEFAULT_STRATEGY and not domains  # the default strategy's ranking: a model may order it
        model = self.ranking if pooled else None
        depth = pool_depth or (model.depth if model is not None else None) if pooled else None
        search_k = max(search_k, depth or 0)
        timings: dict[str, float] = dict(prepared.timings_ms)
        probs = within(prepared.probs, allowed, domains)
        mode: GateMode = gate_mode or self.settings.gate_mode

        search = self._searcher(prepared.vector, timings)
        t0 = time.perf_counter()
        fitted = self._fitted(pooled=depth is not None)
        selection = (
            self._given(domains, probs)
            if domains
            else self._select(query, strategy, probs, mode, seed=seed, top_k=search_k, search=search, fitted=fitted)
        )
        timings["gate"] = _ms(t0)  # choosing the domains (for fused: with its evidence searches)

        t0 = time.perf_counter()
        per_domain = {d: h for d, h in (selection.hits or {}).items() if d in selection.weights}
        if missing := [d for d in selection.active if d not in per_domain]:
            per_domain.update(search(missing, search_k))
        default = Merge(per_domain, selection.weights, probs, bonus, search_k)
        pool = self._candidate_pool(query, default, depth, prepared.vector, rerank_depth or (model.reranked_depth if model else None), timings)
        fused = strategy is DEFAULT_STRATEGY or bool(domains)
        ranked, reranker = self._ranked(query, default, pool, model, top_k, reranker, fused=fused, timings=timings)
        hits = self._calibrated(with_passages(self.store, ranked, self.passage_cache))
        timings["search"] = _ms(t0)
        hits = self._rerank(reranker, query, hits, final_k, timings, reorder=model is None or pool is None)
        timings["retrieval"] = _ms(t_all)

        routing = self._routing(selection, probs, mode, strategy, given=bool(domains))
        routing.scope = sorted(probs) if allowed is not None else None
        pools = [pool] if pool is not None else []
        return Retrieval(query=query, routing=routing, hits=hits, parts=[], timings_ms=timings, vector=prepared.vector, pools=pools)

    def _ranked(
        self,
        query: str,
        default: Merge,
        pool: Pool | None,
        model: RankingModel | None,
        top_k: int,
        reranker: Reranker | None,
        *,
        fused: bool,
        timings: dict[str, float],
    ) -> tuple[list[Candidate], Reranker | None]:
        """The top ``top_k`` candidates by the ranking model over ``pool`` (when both), else by the merge of ``default``
        (``fused``: the default strategy or a product filter, which also put passages trusted feedback confirmed for
        the question first, :meth:`confirmed`); and the reranker still to apply (None: none; after a ranking model it
        scores the model's top N without reordering them, :meth:`_rerank`)."""
        confirmed = self.confirmed(query) if fused else ()
        k = max(top_k, default.search_k * len(default.per_domain)) if confirmed else top_k  # looked for among every hit
        if model is not None and pool is not None:
            ranked = model.rank(pool, default.probs, k)
            reranker = None if model.uses_reranker else reranker  # its logit is in the model's score: not reranked again
        else:
            ranked = self._merged(query, default, k, fuse=fused, timings=timings)
        if confirmed:
            ranked, placed = _confirmed_first(ranked, confirmed, top_k)
            reranker = None if placed else reranker  # the confirmed answer stays first
        return ranked, reranker

    def _searcher(self, vector: np.ndarray, timings: dict[str, float]) -> Search:
        """A search of some domains for ``vector`` (each one's top ``limit``), its milliseconds per domain added to
        ``timings``."""

        def search(ds: Sequence[str], limit: int) -> dict[str, list[Hit]]:
            per, ms = search_domains(self.store, vector, list(ds), limit, self._search_pool)
            timings.update({f"search.{d}": round(v, 3) for d, v in ms.items()})
            return per

        return search

    def _fitted(self, *, pooled: bool) -> RouterFitted:
        """The router's fitted parameters for a selection; for a candidate pool every domain is searched (the fused fit's
        gate, breadth and weights off: out of sample its breadth cut the pool, docs/ranking.md)."""
        fitted = self.router.fitted
        return replace(fitted, fusion=fitted.fusion.every_domain()) if pooled and fitted.fusion is not None else fitted

    def _candidates(
        self,
        query: str,
        per_domain: dict[str, list[Hit]],
        weights: dict[str, float],
        probs: dict[str, float],
        depth: int,
        vector: np.ndarray,
        timings: dict[str, float],
    ) -> Pool:
        """The question's candidate pool (:func:`~service.ranking.features.candidate_pool`): what a ranking model orders
        and its fit reads."""
        lexical = search_lexical(self.lexical, query, [d for d in per_domain if d in weights], depth, timings)
        return candidate_pool(per_domain, weights, probs, depth, lexical=lexical, prior=self.page_prior, vector=vector)

    @property
    def pool_reranker(self) -> Reranker | None:
        """The reranker whose logit a candidate pool reads (None: no reranker, or FEDQA_RERANK off)."""
        return self.reranker if self.settings.rerank == "on" else None

    def _candidate_pool(
        self, query: str, default: Merge, depth: int | None, vector: np.ndarray, n: int | None, timings: dict[str, float]
    ) -> Pool | None:
        """The question's candidate pool at ``depth`` (None: none built) with, given a reranker and ``n``, the reranker's
        logit of its top ``n`` by the default ranking (``default``: the merge's inputs)."""
        if depth is None:
            return None
        pool = self._candidates(query, default.per_domain, default.weights, default.probs, depth, vector, timings)
        reranker = self.pool_reranker
        return self._reranked(reranker, query, pool, default, n, timings) if reranker is not None and n is not None else pool

    def _reranked(self, reranker: Reranker, query: str, pool: Pool, default: Merge, n: int, timings: dict[str, float]) -> Pool:
        """``pool`` with the reranker's logit of its top ``n`` by the default ranking (``default``: the merge's inputs,
        the served merge of the same hits) as features (:func:`~service.ranking.features.reranked`)."""
        head = self._merged(query, default, n, fuse=True, timings=timings)
        in_pool = set(pool.keys())
        head = [c for c in head if (c.domain, c.point_id) in in_pool]
        hits = with_passages(self.store, head, self.passage_cache)
        t0 = time.perf_counter()
        ce = reranker.logits(query, [reranker.params.passage_text(h.passage.title, h.passage.text) for h in hits]).tolist()
        timings["rerank"] = _ms(t0)
        return reranked(pool, {(c.domain, c.point_id): v for c, v in zip(head, ce, strict=True)})

    def _calibrated(self, hits: list[RankedHit]) -> list[RankedHit]:
        """Hits whose features hold the reranker's logit (a ranking model's pool) with its calibrated score, which
        "not covered" reads, as a reranked hit has it."""
        reranker = self.pool_reranker
        if reranker is None:
            return hits
        calibrated = reranker.params.calibrated
        return [h if (ce := h.features.rerank) is None else replace(h, rerank_score=round(calibrated(ce), 6)) for h in hits]

    def _merged(self, query: str, m: Merge, top_k: int, *, fuse: bool, timings: dict[str, float]) -> list[Candidate]:
        """The strategy's merge of the domains' hits (:func:`~service.retrieval.federated.merge`), fused with the lexical
        ranking when :func:`~service.retrieval.lexical.fused_lexical` says so (``fuse``: the default strategy or a product
        filter)."""
        lex = fused_lexical(self.lexical, self.settings.lexical, self.router.fitted.ranks, fuse)
        lexical = search_lexical(lex, query, [d for d in m.per_domain if d in m.weights], m.search_k, timings)
        return merge(m.per_domain, m.weights, top_k, m.bonus, lexical, m.probs)

    @staticmethod
    def _rerank(
        reranker: Reranker | None, query: str, hits: list[RankedHit], top_k: int, timings: dict[str, float], *, reorder: bool
    ) -> list[RankedHit]:
        """The merged top-N reordered by the reranker (timed), cut to ``top_k``; as it is without a reranker. Not
        ``reorder``: a ranking model's order, which stands (the reranker's own weight was fitted on U's scale, not on the
        model's score): its top N only get the reranker's scores."""
        if reranker is None:
            return hits[:top_k]
        t0 = time.perf_counter()
        hits = reranker.rerank(query, hits, top_k) if reorder else reranker.scored(query, hits, top_k)
        timings["rerank"] = _ms(t0)
        return hits

    def _select(
        self,
        query: str,
        strategy: StrategyName,
        probs: dict[str, float],
        mode: GateMode,
        *,
        seed: int | None,
        top_k: int,
        search: Search,
        fitted: RouterFitted | None = None,
    ) -> Selection:
        """The strategy's choice of domains and weights for one query (``fitted``: the router version's parameters, or
        these instead)."""
        return select(
            strategy.value,
            probs,
            list(probs),  # the index's domains, or those of the caller's products
            tau0=self.settings.tau0,
            gate_mode=mode,
            rng=np.random.default_rng(seed),
            query=query,
            selector=self.lfs_selector if strategy.value == "lfs" else None,
            search=search,
            top_k=top_k,
            fitted=fitted or self.router.fitted,
        )

    def _retrieve_questions(self, query: str, parts: list[str], *, top_k: int, **kwargs: Any) -> Retrieval:
        """A message asking several questions: each retrieved on its own, the rankings interleaved."""
        preps = self.prepare_many(parts)
        rets = [self._retrieve_one(q, top_k=top_k, prepared=pp, **kwargs) for q, pp in zip(parts, preps, strict=True)]
        return joint_retrieval(query, parts, rets, top_k)

    def _routing(self, selection: Selection, probs: dict[str, float], mode: GateMode, strategy: StrategyName, *, given: bool) -> Routing:
        """What the router and the strategy decided, as the response reports it."""
        return Routing(
            probabilities={d: round(v, 6) for d, v in probs.items()},
            threshold=round(selection.threshold, 6),
            active_domains=selection.active,
            activation={d: round(a, 6) for d, a in selection.activation.items()},
            fallback=selection.fallback,
            mode=mode if strategy.value == "mkpqa" and not given else "deterministic",
            router=self.router.version or "uniform",
            strategy=strategy,
            selector=selection.detail,
            given=given,
        )

    @staticmethod
    def _given(domains: list[str], probs: dict[str, float]) -> Selection:
        """The caller's product filter (:mod:`~service.retrieval.strategies.given`) over the domains of ``probs``."""
        try:
            return select_given(domains, list(probs))
        except ValueError as exc:
            raise RequestError("domains", str(exc)) from exc

    # ------------------------------------------------------------ by product
    def by_product(
        self, ret: Retrieval, *, top_k: int, question: str | None = None, rerank: bool = True, allowed: frozenset[str] | None = None
    ) -> list[ProductRetrieval]:
        """The products an answer covers when the fitted split rule (:mod:`service.routing.split`) finds several
        plausible ones for ``ret``: each searched on its own (the product filter), best p_j first. [] when one product
        answers: no rule, a product filter given, or one plausible product. ``question`` as in :meth:`retrieve`."""
        rule = self.split
        if rule is None or ret.routing.given:
            return []
        probs = ret.routing.probabilities
        candidates = rule.candidates(probs)
        if len(candidates) < 2:
            return []
        own = self.product_retrievals(ret, candidates, top_k=top_k, question=question, rerank=rerank, allowed=allowed)
        best = {d: s for d, r in own.items() if (s := best_score(r.hits)) is not None}
        kept = rule.keep(candidates, best)
        return [ProductRetrieval(d, probs[d], own[d]) for d in kept] if len(kept) > 1 else []

    def product_retrievals(
        self,
        ret: Retrieval,
        domains: list[str],
        *,
        top_k: int,
        question: str | None = None,
        rerank: bool = True,
        allowed: frozenset[str] | None = None,
    ) -> dict[str, Retrieval]:
        """``ret``'s query searched in each of ``domains`` alone (the product filter), with its query vector."""
        prepared = Prepared(dict(ret.routing.probabilities), ret.vector) if ret.vector is not None else None
        return {
            d: self.retrieve(ret.query, top_k=top_k, prepared=prepared, domains=[d], question=question, rerank=rerank, allowed=allowed)
            for d in domains
        }

    def answer_retrieval(self, ret: Retrieval, *, generate: bool = True, context_passages: int | None = None) -> Answer:
        """The :class:`Answer` for a retrieval, to its ``query`` and ``parts`` (the benchmarks' path; evaluation asks
        through :mod:`service.ask`, as ``/ask`` does)."""
        return self.answerer.answer(ret.query, ret.parts, ret.hits, ret.routing.probabilities, generate=generate, context_passages=context_passages)
