"""The FastAPI application: lifespan, error handling, routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service import __version__
from service.api import admin, ask, chat, docs, evaluate, feedback, health, metrics, page
from service.api.capacity import AnswerLimitMiddleware
from service.api.keys import key_ring
from service.api.metrics import Metrics
from service.api.middleware import REQUEST_ID_HEADER, BodyLimitMiddleware, RequestContextMiddleware
from service.api.security import RateLimiter
from service.api.state import ServiceState
from service.config import Settings, get_settings
from service.feedback.store import FeedbackStore
from service.pipeline import RequestError
from service.retrieval.store import StoreUnavailable
from service.scope import ScopeError

log = logging.getLogger("fedqa.api")


def _clean_errors(errors: list[dict]) -> list[dict]:
    """Validation errors without the offending input (it may be huge or binary)."""
    return [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in errors]


def _summary(errors: list[dict]) -> str:
    parts = []
    for e in errors:
        loc = ".".join(x for x in e["loc"] if x != "body") or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Clear 4xx messages, 503 for the store, never a stack trace to the client."""

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _clean_errors(list(exc.errors()))
        if any(e["type"] == "json_invalid" for e in errors):
            return JSONResponse({"detail": "request body is not valid JSON (it must be UTF-8 encoded JSON)", "errors": errors}, 400)
        return JSONResponse({"detail": _summary(errors), "errors": errors}, 422)

    @app.exception_handler(RequestError)
    async def request_error(_: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(
            {"detail": f"{exc.field}: {exc}", "errors": [{"loc": ["body", exc.field], "msg": str(exc), "type": "value_error"}]},
            422,
        )

    @app.exception_handler(ScopeError)
    async def scope_error(_: Request, exc: ScopeError) -> JSONResponse:
        return JSONResponse(
            {"detail": f"{exc.field}: {exc}", "errors": [{"loc": ["body", exc.field], "msg": str(exc), "type": "forbidden"}]},
            403,
        )

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": f"search store unavailable: {exc}"}, 503)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        rid = getattr(request.state, "request_id", None)
        log.exception("unhandled error on %s %s", request.method, request.url.path, extra={"request_id": rid})
        headers = {REQUEST_ID_HEADER: rid} if rid else None
        return JSONResponse({"detail": f"internal error; see the service log (request id {rid})"}, 500, headers=headers)


def install_middleware(app: FastAPI, settings: Settings, metrics_: Metrics) -> None:
    """Body limits (size and time; innermost), CORS when origins are configured, the answer slots (taken by
    :func:`~service.api.capacity.answer_slot`, given back here), request id/access log/metrics (outermost, so a
    refused answer is logged and counted)."""
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s, metrics=metrics_)
    origins = settings.cors_origin_list()
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", REQUEST_ID_HEADER],
            expose_headers=[REQUEST_ID_HEADER, "Retry-After"],
            max_age=600,
        )
    app.add_middleware(AnswerLimitMiddleware, limit=settings.max_concurrent_answers)
    app.add_middleware(RequestContextMiddleware, metrics=metrics_)


def create_app(settings: Settings | None = None, state: ServiceState | None = None) -> FastAPI:
    """Build the app; the pipeline is loaded once at start-up (lifespan). A keys file that cannot be read
    stops it here (KeysFileError): the service never starts with other keys than configured."""
    settings = settings or get_settings()
    keys = key_ring(settings)
    state = state or ServiceState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.pipeline is None:
            await run_in_threadpool(state.load)
        yield
        state.close()

    app = FastAPI(
        title="fedqa",
        version=__version__,
        description="Federated multi-product question answering (MKP-QA): routed, gated, per-domain retrieval with grounded, cited answers.",
        lifespan=lifespan,
        docs_url=None,  # served by service.api.docs from local assets (no CDN)
        redoc_url=None,
    )
    app.state.fedqa = state
    app.state.metrics = Metrics(state)
    app.state.rate_limiter = RateLimiter(settings.rate_limit_per_minute)
    app.state.keys = keys
    app.state.auth_failures = RateLimiter(settings.auth_failures_per_minute)
    app.state.feedback = FeedbackStore(settings.feedback_path)  # the file is created at the first feedback
    install_error_handlers(app)
    install_middleware(app, settings, app.state.metrics)
    app.include_router(health.router)
    app.include_router(ask.router)
    app.include_router(chat.router)
    app.include_router(metrics.router)
    app.include_router(admin.router)
    app.include_router(evaluate.router)
    app.include_router(feedback.router)
    page.install(app)
    docs.install(app)
    return app
