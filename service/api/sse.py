"""Server-Sent Events: one encoder for the streams of ``/ask`` (named events) and the chat (OpenAI chunks), and the
response that sends them and closes what they hold when it ends."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from service.api.state import Lease


def sse(data: Any, *, event: str | None = None) -> str:
    """One event: an ``event:`` line when it is named, then its data as one line of JSON (a str as it is)."""
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {body}\n\n"


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response of ``events`` that, however it ends (the last event sent, the client gone, an
    error), closes them and then gives the pipeline's ``lease`` back.

    Closing the generator runs its ``finally`` blocks down the chain (the answer's, the LLM's), so the upstream
    LLM stream is closed as the client goes, while the request still holds its answer slot, not at the next
    garbage collection with nobody counting it. Starlette waits for a ``next()`` in flight in its thread before
    the response ends, so the close never meets a running generator."""

    def __init__(self, events: Generator[str, None, None], lease: Lease) -> None:
        super().__init__(events, media_type="text/event-stream")
        self._events = events
        self._lease = lease

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled request (server shutting down) still closes its stream
                await run_in_threadpool(self._close)

    def _close(self) -> None:
        try:
            self._events.close()
        finally:
            self._lease.release()
