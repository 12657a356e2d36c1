"""Admin routes (admin key required): reload the keys file and the active model and index versions."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.api.deps import get_state
from service.api.keys import KeysFileError, key_ring
from service.api.security import require_admin
from service.api.state import ServiceState
from service.artifacts import Registry

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])


@router.post(
    "/reload",
    summary="Re-read the keys file, then rebuild the pipeline from the active versions (index, router, retriever)",
    responses={
        200: {"description": "Reloaded; the body names the versions now serving and the number of keys"},
        409: {"description": "The keys file or the active versions could not be loaded; the previous ones keep serving"},
    },
)
async def reload(request: Request, state: ServiceState = Depends(get_state)) -> JSONResponse:
    before = state.pipeline.versions if state.pipeline else None
    try:
        request.app.state.keys = await run_in_threadpool(key_ring, state.settings)
    except KeysFileError as exc:  # the keys read before keep serving, and so does the pipeline
        return JSONResponse({"reloaded": False, "error": str(exc), "previous": before, "versions": before}, status_code=409)
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
            "keys": len(request.app.state.keys.keys),
        }
    )
