"""FastAPI dependencies: settings, service state, the current pipeline."""

from __future__ import annotations

from fastapi import HTTPException, Request

from service.api.state import ServiceState
from service.config import Settings
from service.pipeline import Pipeline


def get_state(request: Request) -> ServiceState:
    """The app's service state."""
    return request.app.state.fedqa


def get_app_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.fedqa.settings


def get_pipeline(request: Request) -> Pipeline:
    """The current pipeline; 503 (naming the cause, e.g. a missing model file) when none could be loaded."""
    state: ServiceState = request.app.state.fedqa
    if state.pipeline is None:
        raise HTTPException(
            503, f"service unavailable (not ready): {state.error or 'still starting'}", headers={"Retry-After": "10"}
        )
    return state.pipeline
