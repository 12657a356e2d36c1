"""Liveness, readiness and the domain list.

``/domains`` lists the caller's products only (it needs an API key when keys are configured). While some key
sees only some products, ``/readyz`` gives its versions, warnings and causes only to a caller that may see every
product (its status code is the same for everyone, so probes need no key).
The probes are ``async``: they only read memory, so they run on the event loop and answer however many
answers hold the thread pool (a plain ``def`` route waits for a free worker thread).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from service.api.deps import get_pipeline, get_state
from service.api.security import caller_scope, sees_everything
from service.api.state import ServiceState
from service.decisions import decision_of
from service.pipeline import Pipeline
from service.schemas import DomainInfo, DomainsResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: an index and the models are loaded", responses={503: {"description": "Not ready"}})
async def readyz(state: ServiceState = Depends(get_state), everything: bool = Depends(sees_everything)) -> JSONResponse:
    p = state.pipeline
    if p is None:
        detail = (state.error or "starting") if everything else "see the service log"
        return JSONResponse({"status": "not ready", "detail": detail}, status_code=503)
    if not everything:
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "ready", "versions": p.versions, "decisions": decisions(p), "warnings": p.warnings})


def decisions(p: Pipeline) -> dict[str, Any]:
    """What decides the ranking's order, "not covered" and answers by product, and what each was fitted on (null: not
    in force)."""
    rerank = None
    if p.reranker is not None:
        rerank = {
            "version": p.reranker.version,
            "in_force": p.settings.rerank == "on",
            "runtime": p.reranker.backend.value,
            **p.reranker.params.to_json(),
        }
    covered = None
    if p.abstention is not None:
        fit = p.abstention.fit or {}
        covered = {
            "model": p.abstention.name,
            "features": p.abstention.features,
            "target_false_refusal": p.abstention.target_false_refusal,
            "out_of_scope_sources": fit.get("out_of_scope_sources"),
            "heldout": fit.get("heldout"),
            "decision": _says(fit),
        }
    split = None
    if p.split is not None:
        fit = p.split.fit or {}
        split = {
            "rule": p.split.name,
            "min_ratio": p.split.min_ratio,
            "max_gap": p.split.max_gap,
            "heldout": fit.get("heldout"),
            "decision": _says(fit),
        }
    policy = p.answerer.policy
    answer = None if policy is None else {"policy": policy.name, "decision": _says(policy.fit)}
    ranking = None
    if p.ranking_says is not None:
        ranking = {"serves": p.ranking is not None, "decision": p.ranking_says}
    return {"rerank": rerank, "ranking": ranking, "not_covered": covered, "by_product": split, "answer_policy": answer}


def _says(fit: dict[str, Any] | None) -> str | None:
    """Whether the fitted decision or its default serves, and why (None: stored before the verdicts existed)."""
    decision = decision_of(fit)
    return decision.says() if decision else None


@router.get("/domains", response_model=DomainsResponse, summary="Searchable domains and active versions")
def domains(allowed: frozenset[str] | None = Depends(caller_scope), pipeline: Pipeline = Depends(get_pipeline)) -> DomainsResponse:
    known = set(pipeline.router.domains) if pipeline.router.version else set()
    shown = [d for d in pipeline.domains if allowed is None or d in allowed]  # the caller's products only
    return DomainsResponse(
        domains=[DomainInfo(name=d, passages=pipeline.store.count(d), routed=d in known) for d in shown],
        versions=pipeline.versions,
        warnings=pipeline.warnings if allowed is None else [],  # they may name any product
    )
