"""``POST /feedback``: a caller says which passage answered a question (or did not), or that the documentation does
not cover it; ``GET /admin/feedback``: the curators' review queue (admin key).

Feedback is stored in ``$FEDQA_HOME/feedback/feedback.sqlite`` (:mod:`service.feedback.store`) with the caller's key
name and products, whether the key is trusted (``"curator": true`` in the keys file, or an admin key) and the index
version in service. A ``doc_id`` must be a passage of that index (422) within the key's products (403). Rate limited
per key as ``/ask``. With keys off, each client address counts as one key (never trusted).

Feedback does not change answers yet: ``fedqa feedback export`` turns it into labelled questions, and a refit on
them (``fedqa train router --queries``) is what changes the service.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.concurrency import run_in_threadpool

from service.api.deps import acquire_pipeline, get_state
from service.api.keys import ApiKey
from service.api.security import RateLimiter, enforce_rate_limit, key_ring, presented_key, require_admin, require_api_key
from service.api.state import ServiceState
from service.feedback.review import QueueItem, review_queue
from service.feedback.store import FeedbackBounds, FeedbackStore, FeedbackStoreUnavailable, Vote
from service.pipeline import Pipeline, RequestError
from service.retrieval.passage import point_id
from service.schemas import ErrorBody
from service.scope import ScopeError


class FeedbackRequest(BaseModel):
    """Body of ``POST /feedback``: a rating of a passage, a "not covered" verdict, or both."""

    model_config = ConfigDict(strict=True, extra="forbid")

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="The question; at most FEDQA_MAX_QUERY_CHARS characters."
    )
    rating: Literal["up", "down"] | None = Field(default=None, description="up: doc_id answered the question; down: it did not.")
    doc_id: Annotated[str, StringConstraints(min_length=1, max_length=500)] | None = Field(
        default=None, description="The passage rated (a source's doc_id); needed with a rating."
    )
    not_covered: bool = Field(default=False, description="true: the documentation does not answer this question.")
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)] | None = Field(
        default=None, description="Free text for the curators."
    )

    @model_validator(mode="after")
    def _says_something(self) -> FeedbackRequest:
        if self.rating is None and not self.not_covered:
            raise ValueError('give a rating ("up" or "down" with a doc_id) or "not_covered": true')
        if self.rating is not None and self.doc_id is None:
            raise ValueError(f'a rating "{self.rating}" needs the doc_id of the passage it rates')
        return self


class FeedbackAccepted(BaseModel):
    """Body of a 202 from ``POST /feedback``: the stored row's id (a key's repeated vote keeps its first id)."""

    id: str = Field(description="The stored feedback's id.")


class FeedbackQueue(BaseModel):
    """Body of ``GET /admin/feedback``: the review queue, most distinct keys first."""

    questions: list[QueueItem] = Field(description="Questions to review, most distinct keys first.")


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    403: {"model": ErrorBody, "description": "doc_id is a passage of a product outside the API key's products"},
    422: {"model": ErrorBody, "description": "Invalid request, or a doc_id the index in service does not have"},
    429: {"model": ErrorBody, "description": "Over the per-key rate limit (see Retry-After)"},
    503: {"model": ErrorBody, "description": "Service not ready, or the feedback database cannot be written"},
}

router = APIRouter(tags=["feedback"])


async def feedback_caller(request: Request, key: str | None = Depends(presented_key)) -> ApiKey | None:
    """The caller's key as :func:`~service.api.security.require_api_key` lets it in, or an admin key
    (``FEDQA_ADMIN_KEY`` included, which opens no other API route): an admin's feedback is trusted. Rate limited."""
    admins = [k for k in key_ring(request).matches(key) if k.admin] if key else []
    if not admins:
        return await require_api_key(request, key)
    enforce_rate_limit(request, admins[0])
    request.state.api_key, request.state.caller = admins[0].name, admins[0]
    return admins[0]


def _store(request: Request) -> FeedbackStore:
    return request.app.state.feedback


def product_of(pipeline: Pipeline, doc_id: str) -> str | None:
    """The product whose passage ``doc_id`` is in the pipeline's index (None: no such passage)."""
    pid = point_id(doc_id)
    for domain in pipeline.domains:
        if pipeline.passage_cache.passages(pipeline.store, domain, [pid]):
            return domain
    return None


def _vote(req: FeedbackRequest, pipeline: Pipeline, caller: ApiKey | None, client: str) -> Vote:
    """The vote to store; RequestError (422) for a question too long or a passage not in the index, ScopeError (403)
    for a passage outside the caller's products."""
    limit = pipeline.settings.max_query_chars
    if len(req.query) > limit:
        raise RequestError("query", f"query is {len(req.query)} characters; the limit is {limit}")
    domain = product_of(pipeline, req.doc_id) if req.doc_id else None
    if req.doc_id and domain is None:
        raise RequestError("doc_id", "no passage of the index in service has this doc_id")
    allowed = caller.domains if caller is not None else None
    if domain is not None and allowed is not None and domain not in allowed:
        raise ScopeError("doc_id", "this passage is outside this API key's products")
    return Vote(
        query=req.query,
        key_name=caller.name if caller is not None else client,
        key_products=tuple(sorted(allowed)) if allowed is not None else None,
        trusted=caller is not None and caller.trusted,
        index_version=pipeline.store.version,
        rating=req.rating,
        doc_id=req.doc_id,
        domain=domain,
        not_covered=req.not_covered,
        comment=req.comment or None,
    )


def _record(req: FeedbackRequest, request: Request, state: ServiceState, caller: ApiKey | None) -> FeedbackAccepted:
    client = RateLimiter.identity("ip", request.client.host if request.client else "unknown")
    lease = acquire_pipeline(state, request)
    try:
        vote = _vote(req, lease.pipeline, caller, client)
    finally:
        lease.release()
    try:
        return FeedbackAccepted(id=_store(request).record(vote, FeedbackBounds.of(state.settings)))
    except FeedbackStoreUnavailable as exc:
        raise HTTPException(503, f"feedback not stored: {exc}", headers={"Retry-After": "60"}) from None


@router.post("/feedback", status_code=202, response_model=FeedbackAccepted, responses=_ERRORS, summary="Say whether a passage answered a question")
async def feedback(
    req: FeedbackRequest, request: Request, state: ServiceState = Depends(get_state), caller: ApiKey | None = Depends(feedback_caller)
) -> FeedbackAccepted:
    """Store the caller's feedback (its earlier vote on the same question and passage is replaced). It does not
    change answers: curators export it as labelled questions for a refit (``fedqa feedback export``)."""
    return await run_in_threadpool(_record, req, request, state, caller)


_ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No admin key"},
    403: {"model": ErrorBody, "description": "Not an admin key, or admin routes disabled"},
    429: {"model": ErrorBody, "description": "Over the per-key rate limit (see Retry-After)"},
}


@router.get(
    "/admin/feedback", response_model=FeedbackQueue, responses=_ADMIN_ERRORS, tags=["admin"], summary="The curators' review queue of feedback"
)
async def admin_feedback(
    request: Request,
    limit: int = Query(default=50, ge=1, le=1000, description="Most questions listed."),
    admin: ApiKey = Depends(require_admin),
    state: ServiceState = Depends(get_state),
) -> FeedbackQueue:
    """Questions rated down, marked not covered or never confirmed by a trusted key, most distinct keys first (those
    whose feedback stays within the admin key's products)."""
    bounds = FeedbackBounds.of(state.settings)
    votes = await run_in_threadpool(_store(request).votes, bounds)
    return FeedbackQueue(questions=review_queue(votes, limit=limit, allowed=admin.domains))
