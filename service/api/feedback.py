"""``POST /feedback``: a caller says which passage answered a question (or did not), or that the documentation does
not cover it, for a question it sends or for a chat completion it got (``completion_id``); ``GET /admin/feedback``: the
curators' review queue, ``POST /admin/feedback/confirm``: a curator's verdict on a question (admin key).

A chat completion (``POST /v1/chat/completions``) is kept by its id with the question it answered, the caller's key
and the sources it showed (:func:`remember_completion`), bounded as feedback is. Feedback by completion id counts for
that question; a rating without a ``doc_id`` rates the passage the answer quoted, and on a "not covered" answer
"up" agrees (the documentation does not cover it) and "down" disagrees (it does). Another key's completion, an
unknown or an expired one answers 404.

Feedback is stored in ``$FEDQA_HOME/feedback/feedback.sqlite`` (:mod:`service.feedback.store`) with the caller's key
name and products, whether the key is trusted (``"curator": true`` in the keys file, or an admin key) and the index
version in service. A ``doc_id`` must be a passage of that index (422) within the key's products (403). Rate limited
per key as ``/ask``. With keys off, each client address counts as one key (never trusted).

Trusted feedback takes effect at once: after each feedback stored, the labelled questions it establishes
(:func:`~service.feedback.review.labels`: a curator's or admin's "up", or FEDQA_FEEDBACK_MIN_KEYS agreeing keys) are the
pipeline's known answers (:func:`~service.loading.learn_feedback`), as the page prior's fitted questions are. The rest
waits for a refit on them (``fedqa refresh``, or ``fedqa feedback export`` and ``fedqa train router --queries``).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.concurrency import run_in_threadpool

from service.api.deps import acquire_pipeline, get_state
from service.api.keys import ApiKey
from service.api.security import RateLimiter, enforce_rate_limit, key_ring, presented_key, require_admin, require_api_key
from service.api.state import ServiceState
from service.feedback.review import QueueItem, confirmation, question_id, question_of, review_queue
from service.feedback.store import Completion, FeedbackBounds, FeedbackStore, FeedbackStoreUnavailable, Rating, Vote, normalise
from service.generation.modes import AnswerMode
from service.loading import learn_feedback
from service.pipeline import Pipeline, RequestError
from service.retrieval.passage import point_id
from service.schemas import AskResponse, ErrorBody
from service.scope import ScopeError

log = logging.getLogger("fedqa.api")

DocId = Annotated[str, StringConstraints(min_length=1, max_length=500)]
Question = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class FeedbackRequest(BaseModel):
    """Body of ``POST /feedback``: a rating of a passage, a "not covered" verdict, or both, on a question sent
    (``query``) or on the question a chat completion answered (``completion_id``)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    query: Question | None = Field(default=None, description="The question; at most FEDQA_MAX_QUERY_CHARS characters. Or completion_id.")
    completion_id: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None,
        description="Instead of query: the id of a chat completion this key got (POST /v1/chat/completions); the feedback "
        "counts for the question it answered, and a doc_id must be one of its sources.",
    )
    rating: Rating | None = Field(
        default=None,
        strict=False,
        description='up: doc_id answered the question; down: it did not. "down" with no doc_id: the answer did not answer '
        'it (after a "not covered" answer: the documentation does cover it). With completion_id and no doc_id: the '
        'passage the answer quoted; on a "not covered" completion "up" agrees (not covered) and "down" disagrees.',
    )
    doc_id: DocId | None = Field(default=None, description='The passage rated (a source\'s doc_id); needed with "up" and a query.')
    not_covered: bool = Field(default=False, description="true: the documentation does not answer this question.")
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)] | None = Field(
        default=None, description="Free text for the curators."
    )

    @model_validator(mode="after")
    def _says_something(self) -> FeedbackRequest:
        if (self.query is None) == (self.completion_id is None):
            raise ValueError("give either the query or the completion_id of a chat completion")
        if self.rating is None and not self.not_covered:
            raise ValueError('give a rating ("up" or "down") or "not_covered": true')
        if self.rating == Rating.UP and self.doc_id is None and self.completion_id is None:
            raise ValueError('a rating "up" needs the doc_id of the passage that answered')
        return self


class FeedbackAccepted(BaseModel):
    """Body of a 202 from ``POST /feedback``: the stored row's id (a key's repeated vote keeps its first id)."""

    id: str = Field(description="The stored feedback's id.")
    query: str = Field(description="The question the feedback counts for (with completion_id: the question the completion answered).")
    doc_id: str | None = Field(default=None, description="The passage rated (with completion_id and no doc_id: the passage the answer quoted).")
    not_covered: bool = Field(default=False, description="The feedback says the documentation does not cover the question.")


class ConfirmRequest(BaseModel):
    """Body of ``POST /admin/feedback/confirm``: a curator's verdict on one question (the passages that answer it, or
    "not covered"), replacing the curator's earlier word on it."""

    model_config = ConfigDict(strict=True, extra="forbid")

    query: Question | None = Field(default=None, description="The question; or id.")
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="Instead of query: a question's id in the review queue (GET /admin/feedback)."
    )
    doc_ids: list[DocId] = Field(default_factory=list, max_length=50, description="The passages that answer the question.")
    not_covered: bool = Field(default=False, description="true: the documentation does not answer the question (no doc_ids).")
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)] | None = Field(
        default=None, description="Free text for the other curators."
    )

    @model_validator(mode="after")
    def _one_verdict(self) -> ConfirmRequest:
        if (self.query is None) == (self.id is None):
            raise ValueError("give either the query or the id of a question of the review queue")
        if bool(self.doc_ids) == self.not_covered:
            raise ValueError('give either the doc_ids that answer the question or "not_covered": true')
        return self


class Confirmed(BaseModel):
    """Body of a 200 from ``POST /admin/feedback/confirm``: the verdict as stored (trusted feedback of the admin key)."""

    id: str = Field(description="The question's id (as in the review queue).")
    query: str = Field(description="The question confirmed.")
    doc_ids: list[str] = Field(description="The passages confirmed to answer it.")
    not_covered: bool = Field(description="The question was confirmed not covered.")
    rows: list[str] = Field(description="The stored feedback rows' ids.")


class FeedbackQueue(BaseModel):
    """Body of ``GET /admin/feedback``: the review queue, most distinct keys first."""

    questions: list[QueueItem] = Field(description="Questions to review, most distinct keys first.")


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    403: {"model": ErrorBody, "description": "doc_id is a passage of a product outside the API key's products"},
    404: {"model": ErrorBody, "description": "completion_id: no chat completion of this key with this id (unknown, expired or another key's)"},
    422: {"model": ErrorBody, "description": "Invalid request, a doc_id the index in service does not have, or not a source of the completion"},
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


def caller_name(request: Request, caller: ApiKey | None) -> str:
    """The name feedback and chat completions are kept under: the key's, or with keys off the client's address (hashed)."""
    if caller is not None:
        return caller.name
    return RateLimiter.identity("ip", request.client.host if request.client else "unknown")


def answer_passage(response: AskResponse) -> str | None:
    """The passage an answer quoted first: its first citation's, a by-product answer's first product's top passage,
    else the top source; None for a "not covered" answer, a ranking only, or no source."""
    if response.citations and 0 < response.citations[0] <= len(response.sources):
        return response.sources[response.citations[0] - 1].doc_id
    if response.products and response.products[0].doc_ids:
        return response.products[0].doc_ids[0]
    if response.answer_mode in (AnswerMode.NOT_COVERED, AnswerMode.RETRIEVAL) or not response.sources:
        return None
    return response.sources[0].doc_id


def remember_completion(request: Request, completion_id: str, question: str, response: AskResponse) -> None:
    """Keep a chat completion for feedback by its id (a store that cannot be written is logged: the chat goes on)."""
    caller: ApiKey | None = getattr(request.state, "caller", None)
    completion = Completion(
        id=completion_id,
        key_name=caller_name(request, caller),
        key_products=tuple(sorted(caller.domains)) if caller is not None and caller.domains is not None else None,
        index_version=response.versions.get("index"),
        question=question,
        answer_mode=AnswerMode(response.answer_mode),
        doc_ids=tuple(s.doc_id for s in response.sources),
        answer_doc_id=answer_passage(response),
    )
    state: ServiceState = request.app.state.fedqa
    try:
        _store(request).remember(completion, FeedbackBounds.of(state.settings))
    except FeedbackStoreUnavailable as exc:
        log.warning("chat completion %s not kept for feedback: %s", completion_id, exc)


def _resolved(req: FeedbackRequest, completion: Completion) -> FeedbackRequest:
    """What feedback on ``completion`` says of its question (see the module doc); RequestError (422) for a doc_id
    that is not one of its sources."""
    if req.doc_id is not None and req.doc_id not in completion.doc_ids:
        raise RequestError("doc_id", "this passage is not one of the completion's sources")
    rating, doc_id, not_covered = req.rating, req.doc_id, req.not_covered
    if rating is not None and doc_id is None:
        if completion.refused:
            rating, not_covered = (None, True) if rating == Rating.UP else (Rating.DOWN, not_covered)
        else:
            doc_id = completion.answer_doc_id or next(iter(completion.doc_ids), None)
            if doc_id is None and rating == Rating.UP:
                raise RequestError("rating", 'the completion showed no source to rate "up"; send "not_covered": true instead')
    return FeedbackRequest(query=completion.question, rating=rating, doc_id=doc_id, not_covered=not_covered, comment=req.comment)


def _vote(req: FeedbackRequest, pipeline: Pipeline, caller: ApiKey | None, client: str) -> Vote:
    """The vote to store; RequestError (422) for a question too long or a passage not in the index, ScopeError (403)
    for a passage outside the caller's products."""
    query = req.query or ""
    limit = pipeline.settings.max_query_chars
    if len(query) > limit:
        raise RequestError("query", f"query is {len(query)} characters; the limit is {limit}")
    domain = product_of(pipeline, req.doc_id) if req.doc_id else None
    if req.doc_id and domain is None:
        raise RequestError("doc_id", "no passage of the index in service has this doc_id")
    allowed = caller.domains if caller is not None else None
    if domain is not None and allowed is not None and domain not in allowed:
        raise ScopeError("doc_id", "this passage is outside this API key's products")
    return Vote(
        query=query,
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


def _unavailable(exc: FeedbackStoreUnavailable) -> HTTPException:
    return HTTPException(503, f"feedback not stored: {exc}", headers={"Retry-After": "60"})


def _learn(state: ServiceState, request: Request) -> None:
    """The pipeline in service serves the trusted feedback as it now stands (:func:`~service.loading.learn_feedback`)."""
    lease = acquire_pipeline(state, request)
    try:
        learn_feedback(lease.pipeline, state.settings)
    finally:
        lease.release()


def _record(req: FeedbackRequest, request: Request, state: ServiceState, caller: ApiKey | None) -> FeedbackAccepted:
    client = caller_name(request, None)
    bounds = FeedbackBounds.of(state.settings)
    if req.completion_id is not None:
        completion = _store(request).completion(req.completion_id, bounds)
        if completion is None or completion.key_name != caller_name(request, caller):
            raise HTTPException(404, "no chat completion of this API key has this id (unknown, expired, or another key's)")
        req = _resolved(req, completion)
    lease = acquire_pipeline(state, request)
    try:
        vote = _vote(req, lease.pipeline, caller, client)
    finally:
        lease.release()
    try:
        row = _store(request).record(vote, bounds)
    except FeedbackStoreUnavailable as exc:
        raise _unavailable(exc) from None
    _learn(state, request)
    return FeedbackAccepted(id=row, query=vote.query, doc_id=vote.doc_id, not_covered=vote.not_covered)


@router.post("/feedback", status_code=202, response_model=FeedbackAccepted, responses=_ERRORS, summary="Say whether a passage answered a question")
async def feedback(
    req: FeedbackRequest, request: Request, state: ServiceState = Depends(get_state), caller: ApiKey | None = Depends(feedback_caller)
) -> FeedbackAccepted:
    """Store the caller's feedback on a question, or on a chat completion's question (its earlier vote on the same
    question and passage is replaced). Once trusted (a curator's, or enough agreeing keys) its confirmed passage is a
    known answer of the question at once; the rest waits for a refit (``fedqa refresh``)."""
    return await run_in_threadpool(_record, req, request, state, caller)


_ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No admin key"},
    403: {"model": ErrorBody, "description": "Not an admin key, or admin routes disabled"},
    429: {"model": ErrorBody, "description": "Over the per-key rate limit (see Retry-After)"},
}
_CONFIRM_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ADMIN_ERRORS,
    403: {"model": ErrorBody, "description": "Not an admin key, admin routes disabled, or a passage outside the admin key's products"},
    404: {"model": ErrorBody, "description": "id: no question of the stored feedback has this id"},
    422: {"model": ErrorBody, "description": "Invalid request, or a doc_id the index in service does not have"},
    503: {"model": ErrorBody, "description": "Service not ready, or the feedback database cannot be written"},
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


def _confirm(req: ConfirmRequest, request: Request, state: ServiceState, admin: ApiKey) -> Confirmed:
    bounds = FeedbackBounds.of(state.settings)
    query = req.query
    if req.id is not None:
        query = question_of(_store(request).votes(bounds), req.id)
        if query is None:
            raise HTTPException(404, "no question of the stored feedback has this id (see GET /admin/feedback)")
    assert query is not None
    lease = acquire_pipeline(state, request)
    try:
        limit = lease.pipeline.settings.max_query_chars
        if len(query) > limit:
            raise RequestError("query", f"query is {len(query)} characters; the limit is {limit}")
        passages = {}
        for doc_id in dict.fromkeys(req.doc_ids):
            domain = product_of(lease.pipeline, doc_id)
            if domain is None:
                raise RequestError("doc_ids", f"no passage of the index in service has the doc_id {doc_id!r}")
            if admin.domains is not None and domain not in admin.domains:
                raise ScopeError("doc_ids", f"the passage {doc_id!r} is outside this admin key's products")
            passages[doc_id] = domain
        version = lease.pipeline.store.version
    finally:
        lease.release()
    products = tuple(sorted(admin.domains)) if admin.domains is not None else None
    votes = confirmation(
        query, passages, not_covered=req.not_covered, curator=admin.name, key_products=products, index_version=version, comment=req.comment
    )
    try:
        rows = _store(request).confirm(votes, bounds)
    except FeedbackStoreUnavailable as exc:
        raise _unavailable(exc) from None
    _learn(state, request)
    return Confirmed(id=question_id(normalise(query)), query=query, doc_ids=list(passages), not_covered=req.not_covered, rows=rows)


@router.post(
    "/admin/feedback/confirm",
    response_model=Confirmed,
    responses=_CONFIRM_ERRORS,
    tags=["admin"],
    summary="A curator's verdict on a question: the passages that answer it, or not covered",
)
async def admin_feedback_confirm(
    req: ConfirmRequest, request: Request, admin: ApiKey = Depends(require_admin), state: ServiceState = Depends(get_state)
) -> Confirmed:
    """Store the admin key's verdict on a question of the review queue (by ``id``) or any question: trusted feedback
    that replaces the key's earlier word on it (as ``fedqa feedback confirm`` does with the CLI's name)."""
    return await run_in_threadpool(_confirm, req, request, state, admin)
