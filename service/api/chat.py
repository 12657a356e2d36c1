"""OpenAI-compatible chat: ``POST /v1/chat/completions`` and ``GET /v1/models``, so that any OpenAI client or
chat front-end can use fedqa as a model.

The last user message is the question (:mod:`service.api.conversation`): a product it names wins over the
previous turn's (the turn is searched restricted to it); one that only names another product ("and in Perl?")
asks the previous question again for that product; otherwise the previous user turn is prepended for routing and
retrieval (its end, so that the whole stays within FEDQA_MAX_QUERY_CHARS), so that a follow-up is searched with its
context, and the answer is to the last question. Only the last FEDQA_CHAT_TURNS user turns are read. The answer
text carries [n] citations, each also an OpenAI ``url_citation`` annotation of the message (and of the last
streamed chunk's delta); sources, routing, answer mode and confidence come back in the extra field ``fedqa``.
When the question fits several products (``answer_mode: "by_product"``) the reply is a short answer per product,
labelled (the full answers in ``fedqa.products``); with the request field ``"clarify": true`` it asks instead which
of the products is meant, naming them (a reply that names one is then answered for it, as above).
``stream: true`` sends ``chat.completion.chunk`` events and ``data: [DONE]``; the last chunk carries ``fedqa``.
A generated answer that the grounding check rejects after it was streamed is followed by the quoted replacement
(after a blank line).
Same API keys as /ask. The completion's ``id`` is kept with the question it answered and its sources, so that
``POST /feedback`` can rate it by ``completion_id`` (:mod:`service.api.feedback`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Generator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from service import ask as answering
from service.api.capacity import answer_slot
from service.api.conversation import Turn, by_product_text, follow, url_citations
from service.api.deps import acquire_pipeline, get_state
from service.api.feedback import remember_completion
from service.api.metrics import record_answer
from service.api.security import caller_scope, require_api_key
from service.api.sse import EventStream, sse
from service.api.state import ServiceState
from service.events import DoneEvent, Event, ResetEvent, RetrievalEvent, TokenEvent
from service.pipeline import Pipeline, RequestError
from service.retrieval.strategies import DEFAULT_STRATEGY
from service.schemas import AskRequest, Strategy

log = logging.getLogger("fedqa.api")

MODEL_ID = "fedqa"

router = APIRouter(tags=["chat"], dependencies=[Depends(require_api_key), Depends(answer_slot)])  # the slot after the key


class ChatMessage(BaseModel):
    """One turn; ``content`` is text or a list of OpenAI content parts (their text parts are read)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text").strip()
        return (self.content or "").strip()


class ChatRequest(BaseModel):
    """The OpenAI chat-completions body (sampling options are accepted and ignored) plus fedqa's own options."""

    model_config = ConfigDict(extra="allow")

    model: str = MODEL_ID
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    top_k: int | None = Field(default=None, description="fedqa: passages in the ranking.")
    strategy: Strategy = Field(default=DEFAULT_STRATEGY, description="fedqa: retrieval strategy.")
    clarify: bool = Field(
        default=False, description="fedqa: when the question fits several products, ask which one is meant instead of answering per product."
    )


def _user_turns(req: ChatRequest, max_chars: int, turns: int) -> list[str]:
    """The last ``turns`` user messages (FEDQA_CHAT_TURNS), oldest first: earlier ones are never read, however many
    the body holds. The last message must be a user's, within FEDQA_MAX_QUERY_CHARS."""
    last = req.messages[-1].text() if req.messages[-1].role == "user" else ""
    if not last:
        raise RequestError("messages", "the last message must be a non-empty user message")
    if len(last) > max_chars:
        raise RequestError("messages", f"the last user message is {len(last)} characters; the limit is {max_chars}")
    users = [last]
    for message in reversed(req.messages[:-1]):
        if len(users) >= turns:
            break
        if message.role == "user" and (text := message.text()):
            users.append(text)
    return users[::-1]


def _extra(done: dict[str, Any]) -> dict[str, Any]:
    keys = ("answer_mode", "citations", "confidence", "sources", "routing", "strategy", "versions", "error", "timings_ms", "products")
    return {"retrieval_query": done.get("query"), **{k: done.get(k) for k in keys}}


def _events(pipeline: Pipeline, req: ChatRequest, allowed: frozenset[str] | None) -> tuple[Turn, Generator[Event, None, None]]:
    visible = [d for d in pipeline.domains if allowed is None or d in allowed]  # a key never names a product it cannot see
    limit = pipeline.settings.max_query_chars
    turn = follow(
        _user_turns(req, limit, pipeline.settings.chat_turns), visible, max_chars=limit
    )  # service.api.conversation: product switches, "and in X?"
    ask = AskRequest(query=turn.question, top_k=req.top_k, strategy=req.strategy, domains=turn.domains)
    return turn, answering.answer_stream(pipeline, ask, retrieval_query=turn.retrieval_query, allowed=allowed)


def _chunk(cid: str, created: int, model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return sse(body)


def _reply(done: DoneEvent, clarify: bool) -> str:
    """The message's text: the answer, or for an answer given by product a short answer per product (``clarify``:
    the question which product is meant)."""
    products = done.response.products
    return by_product_text(products, clarify=clarify) if products else done.response.answer or ""


def _chunks(events: Generator[Event, None, None], req: ChatRequest, turn: Turn, request: Request, cid: str) -> Generator[str, None, None]:
    """The answer's text as it comes; an answer given by product (announced by the retrieval event) as one piece at
    the end, in the chat's own words (:func:`_reply`). Closed by :class:`~service.api.sse.EventStream` when the
    response ends (the client gone included), it closes ``events``: the answer and its LLM stream stop there."""
    created, model, retrieval_query = int(time.time()), req.model, turn.retrieval_query
    yield _chunk(cid, created, model, {"role": "assistant", "content": ""})
    sent, separate, content, by_product = False, False, "", False
    try:
        for event in events:
            if isinstance(event, RetrievalEvent):
                by_product = bool(event.products)
            elif isinstance(event, TokenEvent) and event.text and not by_product:
                piece = ("\n\n" if separate else "") + event.text
                content += piece
                yield _chunk(cid, created, model, {"content": piece})
                sent, separate = True, False
            elif isinstance(event, ResetEvent):
                separate = sent
            elif isinstance(event, DoneEvent):
                data = event.data()
                record_answer(request, data)
                remember_completion(request, cid, turn.question, event.response)
                if by_product:
                    content = _reply(event, req.clarify)
                    yield _chunk(cid, created, model, {"content": content})
                delta = {"annotations": url_citations(content, data.get("sources") or [])}
                yield _chunk(cid, created, model, delta, "stop", fedqa={**_extra(data), "retrieval_query": retrieval_query})
    except Exception:  # noqa: BLE001 - the 200 is already sent: end the stream with an error chunk
        log.exception("chat stream failed after it started")
        yield sse({"error": {"message": "internal error; see the service log", "type": "server_error"}})
    finally:
        events.close()
    yield sse("[DONE]")


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat: answer the last user message with citations")
def chat_completions(  # noqa: ANN201
    req: ChatRequest, request: Request, state: ServiceState = Depends(get_state), allowed: frozenset[str] | None = Depends(caller_scope)
):
    cid = f"chatcmpl-{uuid.uuid4().hex}"  # kept with its question and sources: POST /feedback takes it as completion_id
    lease = acquire_pipeline(state, request)  # held until the answer (or the stream) is complete, so a reload cannot close it
    try:
        turn, events = _events(lease.pipeline, req, allowed)
        retrieval_query = turn.retrieval_query
        first = next(events)  # validation, routing and search run now, so their errors keep their status (422/503)
        if req.stream:
            return EventStream(_chunks(_chain(first, events), req, turn, request, cid), lease)  # gives the lease back when it ends
        last = [e for e in _chain(first, events) if isinstance(e, DoneEvent)][-1]
    except BaseException:
        lease.release()
        raise
    lease.release()  # a streamed answer releases it when the stream ends
    done = last.data()
    record_answer(request, done)
    remember_completion(request, cid, turn.question, last.response)
    text = _reply(last, req.clarify)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "annotations": url_citations(text, done.get("sources") or [])},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": len(retrieval_query.split()),
            "completion_tokens": len(text.split()),
            "total_tokens": len(retrieval_query.split()) + len(text.split()),
        },
        "fedqa": {**_extra(done), "retrieval_query": retrieval_query},
    }


def _chain(first: Event, rest: Generator[Event, None, None]) -> Generator[Event, None, None]:
    """``first``, then ``rest`` (``yield from``: closing the chain closes ``rest``)."""
    yield first
    yield from rest


@router.get("/v1/models", summary="OpenAI-compatible model list: fedqa itself")
def models() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "fedqa"}]}
