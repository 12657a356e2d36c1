"""FastAPI dependencies: settings, service state, the current pipeline.

The cheap ones are ``async def``: they only read app state, and FastAPI runs a plain ``def``
dependency in its thread pool, a hand-off to another thread and back per dependency per request.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import HTTPException, Request

from service.api.security import caller_sees_everything
from service.api.state import Lease, ServiceState
from service.config import Settings
from service.pipeline import Pipeline


async def get_state(request: Request) -> ServiceState:
    """The app's service state."""
    return request.app.state.fedqa


async def get_app_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.fedqa.settings


def not_ready_cause(request: Request, state: ServiceState) -> str:
    """Why no pipeline is loaded, as this caller may read it: the cause (it may name a server path, e.g. a missing
    model file) for a caller that sees every product (as ``/readyz`` shows it), else a pointer to the service log."""
    if not caller_sees_everything(request):
        return "see the service log"
    return state.error or "still starting"


def acquire_pipeline(state: ServiceState, request: Request) -> Lease:
    """A lease on the current pipeline; 503 (naming the cause to who may read it, :func:`not_ready_cause`) when none
    could be loaded."""
    lease = state.acquire()
    if lease is None:
        raise HTTPException(503, f"service unavailable (not ready): {not_ready_cause(request, state)}", headers={"Retry-After": "10"})
    return lease


def get_pipeline(request: Request) -> Iterator[Pipeline]:
    """The current pipeline, leased for the request (a reload meanwhile closes it only after the request)."""
    lease = acquire_pipeline(request.app.state.fedqa, request)
    try:
        yield lease.pipeline
    finally:
        lease.release()
