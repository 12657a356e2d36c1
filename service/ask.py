"""One question through the pipeline to an :class:`~service.schemas.AskResponse`: the path ``/ask``, the chat,
``fedqa ask`` and evaluation share (:func:`answer` and :func:`answer_stream`). It calls :mod:`service.pipeline`, which
never calls it.

Validate the request, route and retrieve (:meth:`Pipeline.retrieve <service.pipeline.Pipeline.retrieve>`),
answer (:class:`~service.generation.answer.Answerer`), and assemble the response once: one stream of typed events
(:mod:`service.events`), of which the non-streamed answer keeps the last.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass

from service.events import DoneEvent, Event, ResetEvent, RetrievalEvent, TokenEvent
from service.generation.answer import Answer
from service.generation.modes import AnswerMode
from service.pipeline import Pipeline
from service.retrieval.passage import RankedHit, descending
from service.retrieval.results import Prepared, ProductRetrieval, Retrieval
from service.retrieval.strategies import StrategyName
from service.schemas import AnswerConfidence, AskRequest, AskResponse, ProductAnswer, Routing, Source

_CITATION = re.compile(r"\[(\d{1,3})\]")


def answer(pipeline: Pipeline, req: AskRequest, *, retrieval_query: str | None = None, allowed: frozenset[str] | None = None) -> AskResponse:
    """Answer one request (non-streaming). ``retrieval_query``: route and search with this text instead of the
    question (a chat follow-up with its earlier turns); the answer is still to ``req.query``."""
    done = [e for e in answer_stream(pipeline, req, retrieval_query=retrieval_query, incremental=False, allowed=allowed) if isinstance(e, DoneEvent)]
    return done[-1].response


def answer_stream(
    pipeline: Pipeline,
    req: AskRequest,
    *,
    retrieval_query: str | None = None,
    incremental: bool = True,
    allowed: frozenset[str] | None = None,
    prepared: Prepared | None = None,
    context_passages: int | None = None,
) -> Generator[Event, None, None]:
    """Answer as events (:mod:`service.events`): retrieval, token pieces (reset: drop the pieces so far, a rejected
    generation), then done with the full response; ``retrieval_query`` as in :func:`answer`. ``incremental``: stream
    the LLM's completion (False: one completion call). A caller that wants the ranking only (``generate`` false) may
    stop after the :class:`RetrievalEvent`: nothing after it runs.

    Evaluation's, which the public request has no field for: ``prepared``, the question's query vector and router
    probabilities computed already (a batch's); ``context_passages``, passages in an LLM prompt (default
    FEDQA_LLM_CONTEXT_PASSAGES)."""
    t_all = time.perf_counter()
    ret = _retrieve(pipeline, req, retrieval_query, allowed, prepared)
    answered = _by_product(pipeline, req, ret, retrieval_query, allowed, context_passages)
    if len(answered) > 1:
        yield from _product_events(pipeline, req, ret, answered, t_all)
        return
    cited = sources(ret.hits, ret.routing.probabilities)
    yield RetrievalEvent(ret.routing, cited, ret.hits)
    final: Answer | None = None
    parts, hits, probs = ret.parts, ret.hits, ret.routing.probabilities
    for item in pipeline.answerer.stream(
        req.query, parts, hits, probs, generate=req.generate, context_passages=context_passages, incremental=incremental, allowed=allowed
    ):
        if isinstance(item, Answer):
            final = item
        elif item.reset:
            yield ResetEvent()
        elif item.text:
            yield TokenEvent(item.text)
    assert final is not None
    if req.generate:
        ret.timings_ms["generate"] = final.timings_ms["answer"]
    ret.timings_ms["total"] = round((time.perf_counter() - t_all) * 1000.0, 3)
    resp = response(ret, final, req.strategy, pipeline.versions, cited)
    resp.query = req.query
    yield DoneEvent(resp)


@dataclass(frozen=True)
class _Answered:
    """One product's retrieval and its answer (an answer given by product)."""

    product: ProductRetrieval
    answer: Answer


def _by_product(
    pipeline: Pipeline, req: AskRequest, ret: Retrieval, retrieval_query: str | None, allowed: frozenset[str] | None, context_passages: int | None
) -> list[_Answered]:
    """The products' answers when the fitted split rule finds several plausible products (each searched alone and
    answered like a one-product question); a product whose answer is "not covered" (or nothing) is left out. [] (or
    one): the question is answered for one product, as without a rule. Timed as ``by_product``."""
    if not req.generate or req.domains or not ret.hits:
        return []
    t0 = time.perf_counter()
    question = None if retrieval_query is None else req.query
    groups = pipeline.by_product(ret, top_k=pipeline.validate(req), question=question, rerank=req.rerank, allowed=allowed)
    answered = []
    for g in groups:
        r = g.retrieval
        a = pipeline.answerer.answer(
            req.query, r.parts, r.hits, r.routing.probabilities, context_passages=context_passages, allowed=allowed, product=g.domain
        )
        if a.text and a.mode not in (AnswerMode.NOT_COVERED, AnswerMode.NONE):
            answered.append(_Answered(g, a))
    if groups:
        ret.timings_ms["by_product"] = round((time.perf_counter() - t0) * 1000.0, 3)
    return answered


def _product_events(pipeline: Pipeline, req: AskRequest, ret: Retrieval, answered: list[_Answered], t_all: float) -> Iterator[Event]:
    """The events of an answer given by product: its sources are the products' passages in turn, each product's
    answer cites them by their position there, and the answer's text is the products' answers, each labelled."""
    cited = sources(descending([h for a in answered for h in a.product.retrieval.hits]), ret.routing.probabilities)
    yield RetrievalEvent(ret.routing, cited, ret.hits, products=[a.product.domain for a in answered])
    products, offset = [], 0
    for a in answered:
        products.append(product_answer(a.product, a.answer, offset))
        offset += len(a.product.retrieval.hits)
    labelled = [f"{p.domain}: {p.answer}" for p in products]
    for i, piece in enumerate(labelled):
        yield TokenEvent(("\n\n" if i else "") + piece)
    first = answered[0].answer
    final = Answer("\n\n".join(labelled), AnswerMode.BY_PRODUCT, sorted({c for p in products for c in p.citations}), first.confidence, first.error)
    ret.timings_ms["total"] = round((time.perf_counter() - t_all) * 1000.0, 3)
    resp = response(ret, final, req.strategy, pipeline.versions, cited)
    resp.query, resp.products = req.query, products
    yield DoneEvent(resp)


def product_answer(product: ProductRetrieval, answer: Answer, offset: int) -> ProductAnswer:
    """A product's answer with its [n] renumbered to positions in the response's sources (its passages start
    after ``offset`` others)."""
    text = _CITATION.sub(lambda m: f"[{int(m.group(1)) + offset}]", answer.text or "")
    return ProductAnswer(
        domain=product.domain,
        probability=round(product.probability, 6),
        answer=text or None,
        answer_mode=answer.mode,
        citations=[c + offset for c in answer.citations],
        doc_ids=[h.passage.doc_id for h in product.retrieval.hits],
    )


def _retrieve(
    pipeline: Pipeline, req: AskRequest, query: str | None = None, allowed: frozenset[str] | None = None, prepared: Prepared | None = None
) -> Retrieval:
    """Validate the request, then route and retrieve with ``query`` (default: the question). A ``query`` of the
    caller's making (a chat turn joined to the one before) is searched whole; the answer's questions are still those
    of ``req.query``. ``prepared``: the query's vector and router probabilities, computed already."""
    top_k = pipeline.validate(req)
    return pipeline.retrieve(
        query or req.query,
        top_k=top_k,
        seed=req.seed,
        gate_mode=req.gate,
        strategy=req.strategy,
        domains=req.domains,
        question=None if query is None else req.query,
        rerank=req.rerank,
        allowed=allowed,
        prepared=prepared,
    )


def response(
    ret: Retrieval, answer: Answer, strategy: StrategyName | str, versions: dict[str, str | None], cited: list[Source] | None = None
) -> AskResponse:
    """The response of a retrieval and its answer (``cited``: the retrieval's :func:`sources`, when made already)."""
    return AskResponse(
        query=ret.query,
        answer=answer.text,
        answer_mode=answer.mode,
        citations=answer.citations,
        confidence=AnswerConfidence(**asdict(answer.confidence)) if answer.confidence else None,
        sources=sources(ret.hits, ret.routing.probabilities) if cited is None else cited,
        routing=ret.routing,
        strategy=strategy,  # type: ignore[arg-type]
        timings_ms=ret.timings_ms,
        versions=versions,
        error=answer.error or selection_error(ret.routing),
    )


def selection_error(routing: Routing) -> str | None:
    """Why the strategy could not select as it should: lfs with no LLM (or no vote answered), else None."""
    detail = routing.selector
    if detail is None or not detail.votes or any(v is not None for v in detail.votes.values()):
        return None
    reasons = sorted({str(e) for e in (detail.errors or {}).values() if e})
    return f"lfs could not ask an LLM ({'; '.join(reasons) or 'no vote'}): the router's top product was searched"


def sources(hits: list[RankedHit], probabilities: dict[str, float]) -> list[Source]:
    """The response's sources: each hit's passage with its scores (``domain_prob``: the router's p_j of its domain,
    ``domain_weight``: the weight its domain had in the merge, which the hit calls ``domain_prob``; ``rank_score``: the
    key the ranking is sorted by) and its features."""
    return [
        Source(
            **h.passage.payload(),
            score=round(h.score, 6),
            domain_prob=round(probabilities.get(h.passage.domain, 0.0), 6),
            domain_weight=round(h.domain_prob, 6),
            unified_score=round(h.unified_score, 6),
            rerank_score=h.rerank_score,
            rank_score=round(h.final_key, 6),
            features={k: round(v, 6) for k, v in h.features.values().items()},
        )
        for h in hits
    ]
