"""One question through the pipeline to an :class:`~service.schemas.AskResponse`: the path ``/ask``, the chat and
``fedqa ask`` share (:meth:`Pipeline.answer <service.pipeline.Pipeline.answer>` and ``answer_stream`` call it).

Validate the request, route and retrieve (:meth:`Pipeline.retrieve <service.pipeline.Pipeline.retrieve>`),
answer (:class:`~service.generation.answer.Answerer`), and assemble the response once: the stream sends it
as JSON, the non-streamed answer returns it as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from service.generation.answer import Answer
from service.retrieval.passage import RankedHit
from service.retrieval.strategies import StrategyName
from service.schemas import AnswerConfidence, AskRequest, AskResponse, Routing, Source

if TYPE_CHECKING:
    from service.pipeline import Pipeline, Retrieval


def answer(pipeline: Pipeline, req: AskRequest, *, retrieval_query: str | None = None, allowed: frozenset[str] | None = None) -> AskResponse:
    """Answer one request (non-streaming); see :meth:`service.pipeline.Pipeline.answer`."""
    done = [data for name, data in _events(pipeline, req, retrieval_query, incremental=False, allowed=allowed) if name == "done"]
    assert isinstance(done[-1], AskResponse)
    return done[-1]


def answer_stream(
    pipeline: Pipeline, req: AskRequest, *, retrieval_query: str | None = None, incremental: bool = True, allowed: frozenset[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Answer as events (``retrieval``, ``token``, ``reset``, ``done``); see :meth:`service.pipeline.Pipeline.answer_stream`."""
    for name, data in _events(pipeline, req, retrieval_query, incremental=incremental, allowed=allowed):
        if isinstance(data, AskResponse):
            yield name, data.model_dump(mode="json")
        elif name == "retrieval":
            yield name, {"routing": data.routing.model_dump(), "sources": [s.model_dump() for s in sources(data.hits, data.routing.probabilities)]}
        else:
            yield name, data


def _events(
    pipeline: Pipeline, req: AskRequest, retrieval_query: str | None, *, incremental: bool, allowed: frozenset[str] | None = None
) -> Iterator[tuple[str, Any]]:
    """The answer's events: ``retrieval`` as the :class:`Retrieval`, ``done`` as the response object (each built
    once; :func:`answer_stream` turns them into JSON data, :func:`answer` keeps only the response)."""
    t_all = time.perf_counter()
    ret = _retrieve(pipeline, req, retrieval_query, allowed)
    yield "retrieval", ret
    final: Answer | None = None
    for item in pipeline.answerer.stream(
        req.query, ret.hits, ret.routing.probabilities, generate=req.generate, query_vector=ret.vector, incremental=incremental
    ):
        if isinstance(item, Answer):
            final = item
        elif item.reset:
            yield "reset", {}
        elif item.text:
            yield "token", {"text": item.text}
    assert final is not None
    if req.generate:
        ret.timings_ms["generate"] = final.timings_ms["answer"]
    ret.timings_ms["total"] = round((time.perf_counter() - t_all) * 1000.0, 3)
    resp = response(ret, final, req.strategy, pipeline.versions)
    resp.query = req.query
    yield "done", resp


def _retrieve(pipeline: Pipeline, req: AskRequest, query: str | None = None, allowed: frozenset[str] | None = None) -> Retrieval:
    """Validate the request, then route and retrieve with ``query`` (default: the question). A ``query`` of the
    caller's making (a chat turn joined to the one before) is not split into questions: its parts lean on each other."""
    top_k = pipeline.validate(req)
    return pipeline.retrieve(
        query or req.query,
        top_k=top_k,
        seed=req.seed,
        gate_mode=req.gate,
        strategy=req.strategy,
        domains=req.domains,
        split=query is None,
        rerank=req.rerank,
        allowed=allowed,
    )


def response(ret: Retrieval, answer: Answer, strategy: StrategyName | str, versions: dict[str, str | None]) -> AskResponse:
    """The response of a retrieval and its answer."""
    return AskResponse(
        query=ret.query,
        answer=answer.text,
        answer_mode=answer.mode.value,
        citations=answer.citations,
        confidence=AnswerConfidence(**asdict(answer.confidence)) if answer.confidence else None,
        sources=sources(ret.hits, ret.routing.probabilities),
        routing=ret.routing,
        strategy=strategy,  # type: ignore[arg-type]
        timings_ms=ret.timings_ms,
        versions=versions,
        error=answer.error or selection_error(ret.routing),
    )


def selection_error(routing: Routing) -> str | None:
    """Why the strategy could not select as it should: lfs with no LLM (or no vote answered), else None."""
    selector = routing.selector or {}
    votes = selector.get("votes")
    if not votes or any(v is not None for v in votes.values()):
        return None
    reasons = sorted({str(e) for e in (selector.get("errors") or {}).values() if e})
    return f"lfs could not ask an LLM ({'; '.join(reasons) or 'no vote'}): the router's top product was searched"


def sources(hits: list[RankedHit], probabilities: dict[str, float]) -> list[Source]:
    """The response's sources: each hit's passage with its scores (``domain_prob``: the router's p_j of its domain,
    ``domain_weight``: the weight its domain had in the merge, which the hit calls ``domain_prob``)."""
    return [
        Source(
            **h.passage.payload(),
            score=round(h.score, 6),
            domain_prob=round(probabilities.get(h.passage.domain, 0.0), 6),
            domain_weight=round(h.domain_prob, 6),
            unified_score=round(h.unified_score, 6),
            rerank_score=h.rerank_score,
        )
        for h in hits
    ]
