"""Admin routes (admin key required): reload the active model and index versions."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.api.deps import get_state
from service.api.security import require_admin
from service.api.state import ServiceState
from service.artifacts import Registry

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])


@router.post(
    "/reload",
    summary="Rebuild the pipeline from the active versions (index, router, retriever)",
    responses={
        200: {"description": "Reloaded; the body names the versions now serving"},
        409: {"description": "The active versions could not be loaded; the previous ones keep serving"},
    },
)
async def reload(state: ServiceState = Depends(get_state)) -> JSONResponse:
    before = state.pipeline.versions if state.pipeline else None
    try:
        await run_in_threadpool(state.load)
    except Exception as exc:  # the old pipeline is still in place
        return JSONResponse(
            {"reloaded": False, "error": str(exc), "previous": before, "versions": state.pipeline.versions if state.pipeline else None},
            status_code=409,
        )
    if state.pipeline is None:
        return JSONResponse({"reloaded": False, "error": state.error or "no pipeline", "previous": before, "versions": None}, 409)
    return JSONResponse(
        {
            "reloaded": True,
            "previous": before,
            "versions": state.pipeline.versions,
            "active": Registry(state.settings.home_dir).active(),
            "warnings": state.pipeline.warnings,
        }
    )
