"""ASGI middleware: request id + access log + HTTP metrics, and the request body size limit.

Plain ASGI (not BaseHTTPMiddleware), so streamed answers (Server-Sent Events) pass through
untouched and are timed until their last byte.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

import anyio
from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.metrics import UNMATCHED, Metrics
from service.logs import REQUEST_ID

access_log = logging.getLogger("fedqa.access")

REQUEST_ID_HEADER = "X-Request-ID"
QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})  # probes and scrapes: access-logged at DEBUG
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def new_request_id(incoming: str | None) -> str:
    """The client's X-Request-ID when it is short and plain, else a fresh one."""
    if incoming and _SAFE_ID.match(incoming):
        return incoming
    return uuid.uuid4().hex


def route_template(scope: Scope) -> str:
    """The matched route's path template (set by Starlette's router), or ``<unmatched>``."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else UNMATCHED


class RequestContextMiddleware:
    """Gives each request an id (``X-Request-ID``, echoed), logs one access line, feeds the HTTP metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_request_id(_header(scope, b"x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        token = REQUEST_ID.set(rid)
        method = scope.get("method", "")
        status = 500
        t0 = time.perf_counter()
        if self.metrics is not None:
            self.metrics.request_started()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            status = 500
            raise
        finally:
            seconds = time.perf_counter() - t0
            route = route_template(scope)
            if self.metrics is not None:
                self.metrics.observe_request(method, route, status, seconds)
            client = scope.get("client")
            access_log.log(
                logging.DEBUG if route in QUIET_ROUTES and status < 400 else logging.INFO,
                "%s %s %d %.1fms",
                method,
                scope.get("path", ""),
                status,
                seconds * 1000,
                extra={
                    "method": method,
                    "path": scope.get("path", ""),
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "client": client[0] if client else None,
                },
            )
            REQUEST_ID.reset(token)


class BodyTooLarge(HTTPException):
    """The request body is over FEDQA_MAX_BODY_BYTES (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {limit} bytes (FEDQA_MAX_BODY_BYTES)")


class BodyTooSlow(HTTPException):
    """The request body did not arrive within FEDQA_BODY_TIMEOUT_S (408; the connection is closed)."""

    def __init__(self, timeout_s: float) -> None:
        detail = f"request body did not arrive within {timeout_s:g} s (FEDQA_BODY_TIMEOUT_S)"
        super().__init__(408, detail, headers={"Connection": "close"})


class BodyLimitMiddleware:
    """413 for bodies over ``max_bytes``: at once from Content-Length, else while the body streams in; 408 for a
    body not in whole ``timeout_s`` after the request's headers (uvicorn has no such timeout: a client sending a
    byte now and then would hold its connection and its handler for ever).

    ``receive`` raises :class:`BodyTooLarge` or :class:`BodyTooSlow`; FastAPI passes HTTPExceptions from body
    reading through, so the answer is 413 or 408. Once the body is in, ``receive`` (which then waits for the
    client to go) is not timed.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None, metrics: Metrics | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.metrics = metrics

    async def _reject(self, send: Send, exc: HTTPException) -> None:
        body = json.dumps({"detail": exc.detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
        await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _count(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.rejected.labels(reason).inc()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                too_big = False  # the server rejects a malformed Content-Length itself
            if too_big:
                self._count("body_too_large")
                await self._reject(send, BodyTooLarge(self.max_bytes))
                return
        seen = 0
        started = complete = False
        deadline = None if self.timeout_s is None else anyio.current_time() + self.timeout_s

        async def limited_receive() -> Message:
            nonlocal seen, complete
            if complete or deadline is None:
                message = await receive()
            else:
                try:
                    with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                        message = await receive()
                except TimeoutError:
                    self._count("body_timeout")
                    raise BodyTooSlow(self.timeout_s or 0.0) from None
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    self._count("body_too_large")
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (BodyTooLarge, BodyTooSlow) as exc:
            if started:
                raise
            await self._reject(send, exc)  # counted when it was raised
