"""A cap on answering requests in flight (``FEDQA_MAX_CONCURRENT_ANSWERS``): beyond it, 503 with ``Retry-After`` at once.

Answers wait on models, stores and LLM endpoints in the thread pool; without a cap a burst queues there
without bound and every answer in it gets slower. A request takes its slot in :func:`answer_slot`, a dependency
that the answering routes run after the key check (:func:`~service.api.security.require_api_key`) and after
FastAPI has read and parsed the body: a client without a key, or one that sends its body slowly, never holds a
slot. The slot is given back by :class:`AnswerLimitMiddleware`, plain ASGI around the whole app, when the request
is over: an answer counts until the last byte of its body (a stream until it ends), and a refused one costs no thread.
Probes and scrapes (``/healthz``, ``/readyz``, ``/metrics``) are never counted nor refused: they are
``async`` routes that only read memory, so they answer on the event loop however busy the pool is.
"""

from __future__ import annotations

from fastapi import HTTPException, Request, status
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.metrics import Metrics

ANSWER_ROUTES = frozenset({"/ask", "/v1/chat/completions"})
RETRY_AFTER_S = 1
SLOT = "answer_slot"  # the request's :class:`Slot`, in the ASGI scope's state


class AnswerSlots:
    """At most ``limit`` slots taken at once (0: no cap). The count lives in the event loop's thread (ASGI calls
    and ``async`` dependencies run there), so it needs no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def take(self) -> bool:
        """Take a slot: False when all are taken."""
        if self.limit > 0 and self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def give_back(self) -> None:
        self.in_flight -= 1


class Slot:
    """One request's claim on :class:`AnswerSlots`: taken by :func:`answer_slot`, given back once the request is over."""

    def __init__(self, slots: AnswerSlots) -> None:
        self.slots = slots
        self.held = False

    def take(self) -> bool:
        if not self.held:
            self.held = self.slots.take()
        return self.held

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.give_back()


class AnswerLimitMiddleware:
    """Gives each POST to ``paths`` a :class:`Slot` (taken later by :func:`answer_slot`) and gives it back when
    the request is over, however it ends."""

    def __init__(self, app: ASGIApp, limit: int, paths: frozenset[str] = ANSWER_ROUTES) -> None:
        self.app = app
        self.slots = AnswerSlots(limit)
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        counted = scope["type"] == "http" and self.slots.limit > 0 and scope.get("method") == "POST" and scope.get("path") in self.paths
        if not counted:
            await self.app(scope, receive, send)
            return
        slot = Slot(self.slots)
        scope.setdefault("state", {})[SLOT] = slot
        try:
            await self.app(scope, receive, send)
        finally:
            slot.give_back()


async def answer_slot(request: Request) -> None:
    """Take the request's answer slot (after the key check and the body: see the module), else 503 with
    ``Retry-After``; nothing to take where the cap is off."""
    slot: Slot | None = getattr(request.state, SLOT, None)
    if slot is None or slot.take():
        return
    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.rejected.labels("busy").inc()
    detail = f"busy: {slot.slots.limit} answers in flight (FEDQA_MAX_CONCURRENT_ANSWERS); retry in {RETRY_AFTER_S} s"
    raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail, headers={"Retry-After": str(RETRY_AFTER_S)})
