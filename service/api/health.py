"""Liveness, readiness and the domain list.

The probes are ``async``: they only read memory, so they run on the event loop and answer however many
answers hold the thread pool (a plain ``def`` route waits for a free worker thread).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from service.api.deps import get_pipeline, get_state
from service.api.state import ServiceState
from service.pipeline import Pipeline
from service.schemas import DomainInfo, DomainsResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: an index and the models are loaded", responses={503: {"description": "Not ready"}})
async def readyz(state: ServiceState = Depends(get_state)) -> JSONResponse:
    p = state.pipeline
    if p is None:
        return JSONResponse({"status": "not ready", "detail": state.error or "starting"}, status_code=503)
    return JSONResponse({"status": "ready", "versions": p.versions, "warnings": p.warnings})


@router.get("/domains", response_model=DomainsResponse, summary="Searchable domains and active versions")
def domains(pipeline: Pipeline = Depends(get_pipeline)) -> DomainsResponse:
    known = set(pipeline.router.domains) if pipeline.router.version else set()
    return DomainsResponse(
        domains=[DomainInfo(name=d, passages=pipeline.store.count(d), routed=d in known) for d in pipeline.domains],
        versions=pipeline.versions,
        warnings=pipeline.warnings,
    )
