"""``POST /ask``: answer a question with sources, routing and timings (JSON or Server-Sent Events)."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service import ask as answering
from service.api.capacity import answer_slot
from service.api.deps import acquire_pipeline, get_state
from service.api.metrics import record_answer
from service.api.security import caller_scope, require_api_key
from service.api.sse import EventStream, sse
from service.api.state import Lease, ServiceState
from service.events import DoneEvent, Event
from service.retrieval.store import StoreUnavailable
from service.schemas import AskRequest, AskResponse, ErrorBody

log = logging.getLogger("fedqa.api")

router = APIRouter(tags=["ask"], dependencies=[Depends(require_api_key), Depends(answer_slot)])  # the slot after the key

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    403: {"model": ErrorBody, "description": "domains names a product outside the API key's products"},
    400: {"model": ErrorBody, "description": "Body is not valid JSON"},
    413: {"model": ErrorBody, "description": "Body larger than FEDQA_MAX_BODY_BYTES"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    429: {"model": ErrorBody, "description": "Over the per-key rate limit (see Retry-After)"},
    503: {"model": ErrorBody, "description": "Service not ready, store unavailable, or FEDQA_MAX_CONCURRENT_ANSWERS in flight (Retry-After)"},
}


def _sse(events: Generator[Event, None, None], request: Request) -> Generator[str, None, None]:
    """Events as SSE; a failure after the stream started (status already sent) ends it with an ``error`` event.
    Closed by :class:`~service.api.sse.EventStream` when the response ends (the client gone included), it closes
    ``events``: the answer, and the LLM stream under it, stop there."""
    try:
        for event in events:
            data = event.data()
            if isinstance(event, DoneEvent):
                record_answer(request, data)
            yield sse(data, event=event.name)
    except Exception as exc:  # noqa: BLE001 - the 200 is already sent: report in-band, log with the request id
        log.exception("stream failed after it started")
        status = 503 if isinstance(exc, StoreUnavailable) else 500
        detail = f"search store unavailable: {exc}" if status == 503 else "internal error; see the service log"
        yield sse({"status": status, "detail": detail}, event="error")
    finally:
        events.close()


def _chain(first: Event, rest: Generator[Event, None, None]) -> Generator[Event, None, None]:
    """``first``, then ``rest`` (``yield from``: closing the chain closes ``rest``)."""
    yield first
    yield from rest


@router.post(
    "/ask",
    response_model=AskResponse,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "JSON, or events when stream=true"}},
    summary="Answer a question from the product documentation",
)
async def ask(  # noqa: ANN201 - JSON or a stream
    req: AskRequest, request: Request, state: ServiceState = Depends(get_state), allowed: frozenset[str] | None = Depends(caller_scope)
):
    """Every question is answered in the thread pool, retrieval alone (``generate: false``) included: it usually
    takes milliseconds, but with ``lfs`` (one LLM call per domain), a Qdrant server or the first scan of the
    domains' titles it takes seconds, and the event loop's thread must stay free for every other request
    (the probes ``/healthz`` and ``/readyz`` above all)."""
    return await run_in_threadpool(_ask, req, request, state, allowed)


def _answer(req: AskRequest, request: Request, lease: Lease, allowed: frozenset[str] | None) -> Response:
    answer = answering.answer(lease.pipeline, req, allowed=allowed)
    record_answer(request, answer)
    # Serialised here: FastAPI would validate the returned model again, in a second thread-pool hand-off.
    return Response(answer.model_dump_json(), media_type="application/json")


def _ask(req: AskRequest, request: Request, state: ServiceState, allowed: frozenset[str] | None):  # noqa: ANN202 - JSON or a stream
    lease = acquire_pipeline(state, request)  # held until the answer (or the stream) is complete
    streaming = False
    try:
        if req.stream:
            events = answering.answer_stream(lease.pipeline, req, allowed=allowed)
            first = next(events)  # validation, routing and search run now, so their errors get a real status (422/503)
            streaming = True
            return EventStream(_sse(_chain(first, events), request), lease)  # gives the lease back when it ends
        return _answer(req, request, lease, allowed)
    finally:
        if not streaming:
            lease.release()
