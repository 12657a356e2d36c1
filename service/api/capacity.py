"""A cap on answering requests in flight (``FEDQA_MAX_CONCURRENT_ANSWERS``): beyond it, 503 with ``Retry-After`` at once.

Answers wait on models, stores and LLM endpoints in the thread pool; without a cap a burst queues there
without bound and every answer in it gets slower. The cap is plain ASGI around the whole app, so an
answer counts until the last byte of its body (a stream until it ends), and a refused one costs no thread.
Probes and scrapes (``/healthz``, ``/readyz``, ``/metrics``) are never counted nor refused: they are
``async`` routes that only read memory, so they answer on the event loop however busy the pool is.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.metrics import Metrics

ANSWER_ROUTES = frozenset({"/ask", "/v1/chat/completions"})
RETRY_AFTER_S = 1


class AnswerLimitMiddleware:
    """At most ``limit`` POSTs to ``paths`` at once (0: no cap); the rest get 503 with ``Retry-After``.

    The count lives in the event loop's thread (ASGI calls run there), so it needs no lock."""

    def __init__(self, app: ASGIApp, limit: int, paths: frozenset[str] = ANSWER_ROUTES, metrics: Metrics | None = None) -> None:
        self.app = app
        self.limit = limit
        self.paths = paths
        self.metrics = metrics
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        counted = scope["type"] == "http" and self.limit > 0 and scope.get("method") == "POST" and scope.get("path") in self.paths
        if not counted:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self._reject(send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _reject(self, send: Send) -> None:
        if self.metrics is not None:
            self.metrics.rejected.labels("busy").inc()
        detail = f"busy: {self.limit} answers in flight (FEDQA_MAX_CONCURRENT_ANSWERS); retry in {RETRY_AFTER_S} s"
        body = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(RETRY_AFTER_S).encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
