"""``/evaluate``: evaluation jobs (create, follow, cancel, report), run by a background worker.

Jobs live in ``FEDQA_JOBS_DB`` (default ``$FEDQA_HOME/eval/jobs.sqlite``); every finished question is
committed at once, so a restart loses no finished result and unfinished jobs resume when the service
starts again. When that file cannot be written (a read-only home), the service starts without the
job worker: /ask serves, /evaluate dry runs work, and the job routes answer 503 naming the cause.
A job holds a lease on the pipeline it started with, so a reload meanwhile does not change (or
close) what answers it.

A job belongs to the key that created it: only that key, or an admin key (``"admin": true`` in the keys file),
lists, reads and cancels it, within the products the key sees (with keys off the API is open: every caller
sees every job). The worker shares itself between keys: a job pauses after ``FEDQA_JOBS_SLICE_S`` seconds
when another key's job waits, keeping the pipeline it started with until it resumes.

Bounds: one API key (one client address when keys are off) has at most ``FEDQA_JOBS_MAX_UNFINISHED_PER_KEY``
jobs queued or running (429 with Retry-After beyond), a job holds at most ``FEDQA_JOBS_MAX_QUESTIONS``
questions of at most ``FEDQA_MAX_QUERY_CHARS`` characters each, each with its ``domains`` field (``[]``: out of
scope on purpose; 422 naming those without it); of a key's finished jobs the newest
``FEDQA_JOBS_KEEP_FINISHED_PER_KEY`` are kept, and older ones go first when its jobs' questions would pass
``FEDQA_JOBS_MAX_QUESTION_BYTES_PER_KEY`` bytes (429 when its unfinished jobs alone would, 422 when the job alone
would); a cancelled job drops its questions at once; finished jobs are deleted ``FEDQA_JOBS_KEEP_DAYS`` after
they finished (checked at start-up and on every new job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from service.api.deps import not_ready_cause
from service.api.keys import ApiKey
from service.api.records import questions_body
from service.api.security import RateLimiter, caller_scope, caller_sees_everything, require_api_key
from service.api.state import Lease, ServiceState
from service.config import Settings
from service.evaluation.jobs import JobStore, JobStoreUnavailable
from service.evaluation.judges import open_judge
from service.evaluation.quota import JobQuota, TooManyJobs, TooMuchStored
from service.evaluation.report import render
from service.evaluation.runner import (
    EvaluationError,
    create_job,
    load_dataset,
    needs_judge,
    pinned_versions,
    plan,
    run_job,
)
from service.evaluation.spec import JobSpec
from service.evaluation.worker import EvalWorker, Turn
from service.queries import MISSING_DOMAINS, LabelError
from service.schemas import ErrorBody, EvalQuery, EvaluateJob, EvaluateRequest
from service.scope import check_domains, labelled_within, visible, within

log = logging.getLogger("fedqa.api")


_WORKER_LOCK = threading.Lock()
JOB_RETRY_AFTER_S = 60


def purge_finished(store: JobStore, settings: Settings) -> None:
    """Delete the finished jobs older than FEDQA_JOBS_KEEP_DAYS (0: keep them)."""
    if settings.jobs_keep_days > 0:
        removed = store.purge(time.time() - settings.jobs_keep_days * 86400.0)
        if removed:
            log.info("deleted %d evaluation job(s) finished more than %g days ago", removed, settings.jobs_keep_days)


def client_identity(request: Request, caller: ApiKey | None) -> str:
    """Who asks, recorded as a job's creator and counted for its bounds: the API key the request was let in with
    (part of its digest: the same key under another name or position is the same creator), else its address (hashed)."""
    if caller is not None:
        return caller.identity
    return RateLimiter.identity("ip", request.client.host if request.client else "unknown")


def quota(settings: Settings) -> JobQuota:
    """The bounds every key's jobs are held to (see the module doc)."""
    return JobQuota(
        max_unfinished=settings.jobs_max_unfinished_per_key,
        keep_finished=settings.jobs_keep_finished_per_key,
        max_question_bytes=settings.jobs_max_question_bytes_per_key,
    )


class PausedLeases:
    """The pipelines of jobs the worker paused for another key's job: a job resumes on the pipeline it started with,
    so a reload meanwhile changes nothing of what answers it."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()

    def take(self, job_id: str) -> Lease | None:
        """The lease the job paused with, else one on the current pipeline (None: none is loaded)."""
        with self._lock:
            held = self._held.pop(job_id, None)
        return held or self.state.acquire()

    def keep(self, job_id: str, lease: Lease) -> None:
        with self._lock:
            self._held[job_id] = lease

    def forget(self, job_id: str) -> None:
        """The job will not resume here: give its lease back."""
        with self._lock:
            held = self._held.pop(job_id, None)
        if held is not None:
            held.release()


def _worker(app: FastAPI) -> EvalWorker:
    """The app's evaluation worker (created on first use); 503 when the jobs database cannot be written."""
    with _WORKER_LOCK:  # concurrent first requests must not open (and migrate) the jobs database twice
        return _worker_locked(app)


def _worker_locked(app: FastAPI) -> EvalWorker:
    worker = getattr(app.state, "eval_worker", None)
    if worker is None:
        state = app.state.fedqa
        try:
            store = JobStore.for_settings(state.settings)
            purge_finished(store, state.settings)
        except JobStoreUnavailable as exc:
            raise HTTPException(503, f"evaluation jobs are unavailable on this instance: {exc}") from None
        leases = PausedLeases(state)

        def run(job_id: str, should_stop: Turn) -> None:
            lease = leases.take(job_id)  # a reload meanwhile closes this pipeline only after the job
            if lease is None:
                raise EvaluationError("no pipeline loaded")
            try:
                spec = store.spec(job_id)
                if spec is None:
                    raise EvaluationError(f"no evaluation job {job_id}")
                judge = open_judge(state.settings, lease.pipeline.llm) if needs_judge(spec) else None
                run_job(lease.pipeline, judge, store, job_id, should_stop=should_stop)
            finally:
                if should_stop.yielded:
                    leases.keep(job_id, lease)
                else:
                    lease.release()

        worker = EvalWorker(store, run, ready=lambda: state.pipeline is not None, slice_s=state.settings.jobs_slice_s, forget=leases.forget)
        app.state.eval_worker = worker
    return worker


def _request_worker(request: Request) -> EvalWorker:
    """The app's worker for a request: its 503 names the jobs database's path only to who may see server details."""
    try:
        return _worker(request.app)
    except HTTPException as exc:
        if exc.status_code == 503 and not caller_sees_everything(request):
            raise HTTPException(503, "evaluation jobs are unavailable on this instance: see the service log (FEDQA_JOBS_DB)") from None
        raise


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the worker with the service (it resumes unfinished jobs); stop it after the question in flight.
    Without a writable jobs database the service runs without it (logged once)."""
    try:
        worker = _worker(app)
    except HTTPException as exc:
        log.warning("starting without the evaluation job worker: %s", exc.detail)
        yield
        return
    worker.start()
    yield
    await run_in_threadpool(worker.stop)


router = APIRouter(tags=["evaluate"], dependencies=[Depends(require_api_key)], lifespan=lifespan)

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    403: {"model": ErrorBody, "description": "domains names a product outside the API key's products"},
    404: {"model": ErrorBody, "description": "No such job"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    429: {"model": ErrorBody, "description": "Too many unfinished jobs for this key (see Retry-After)"},
    503: {"model": ErrorBody, "description": "Store or index unavailable, or no writable jobs database (FEDQA_JOBS_DB)"},
}


def _view(job: dict, request: Request) -> EvaluateJob:
    spec = dict(job["spec"])
    dataset = spec.pop("dataset", "inline")
    done = job["status"] == "done"
    return EvaluateJob(
        id=job["id"],
        status=job["status"],
        progress=job["progress"],
        dataset=dataset,
        spec=spec,
        error=job["error"],
        results=job["summary"] if done else None,
        report=str(request.url_for("evaluation_report", job_id=job["id"])) if done else None,
    )


@router.post(
    "/evaluate",
    status_code=202,
    response_model=EvaluateJob,
    responses=_ERRORS,
    summary="Start an evaluation job (or a dry run counting its LLM calls)",
)
def start(
    req: EvaluateRequest,
    request: Request,
    allowed: frozenset[str] | None = Depends(caller_scope),
    caller: ApiKey | None = Depends(require_api_key),
) -> EvaluateJob | JSONResponse:
    """A key that sees only some products evaluates within them (the job records its ``scope``); of a named
    dataset it gets only the questions of its products."""
    state = request.app.state.fedqa
    check_domains(req.domains, allowed)
    queries = _questions(req, state.settings, allowed)
    asked = req.model_dump(include={"strategies", "metrics", "top_k", "gate", "seed", "domains"})
    spec = JobSpec.model_validate(
        {
            **asked,
            "strategies": list(dict.fromkeys(asked["strategies"])),
            "metrics": list(dict.fromkeys(asked["metrics"])),
            "scope": None if allowed is None else sorted(allowed),
        }
    )
    with state.lease() as pipeline:
        if pipeline is None:
            from service.retrieval.store import StoreUnavailable

            raise StoreUnavailable(not_ready_cause(request, state))
        judge = open_judge(state.settings, pipeline.llm) if needs_judge(spec) else None
        if needs_judge(spec) and judge is None:
            raise HTTPException(
                422,
                "metrics: answer, wixqa, rageval and ragxplain need a judge; set FEDQA_JUDGE_BASE_URL or an LLM, or ask for metrics ['retrieval']",
            )
        searchable = within(dict.fromkeys(pipeline.domains, 0.0), allowed)  # the caller's products in the index
        the_plan = plan(spec, len(queries), len(searchable), state.settings.judge_retries)
        versions = pinned_versions(pipeline, judge, spec)
    dataset = req.dataset or "inline"
    if req.dry_run:
        body = EvaluateJob(
            id=None,
            status="dry_run",
            progress={"done": 0, "total": len(queries) * len(spec.strategies)},
            dataset=dataset,
            spec=spec.view(),
            plan=the_plan,
        )
        return JSONResponse(body.model_dump(), status_code=200)
    worker = _request_worker(request)
    purge_finished(worker.store, state.settings)
    job_id = _create(worker.store, state.settings, spec, queries, dataset, versions, client_identity(request, caller))
    worker.start()
    worker.wake()
    view = _view(_job(request, job_id, allowed, caller), request)
    view.plan = the_plan
    return view


def _create(store: JobStore, settings: Settings, spec: JobSpec, queries: list[EvalQuery], dataset: str, versions: dict[str, Any], client: str) -> str:
    """The new job's id, held to the key's :func:`quota`: 422 for a job that can never fit, 429 (Retry-After) for one
    that fits once the key's other jobs finish or are cancelled."""
    try:
        return create_job(store, spec, queries, dataset, versions, client=client, quota=quota(settings))
    except EvaluationError as exc:
        raise HTTPException(422, str(exc)) from None
    except TooManyJobs as exc:
        raise HTTPException(
            429,
            f"{exc}: wait for one to finish or cancel one (FEDQA_JOBS_MAX_UNFINISHED_PER_KEY)",
            headers={"Retry-After": str(JOB_RETRY_AFTER_S)},
        ) from None
    except TooMuchStored as exc:
        if exc.asked > exc.limit:  # never fits, however long the client waits
            raise HTTPException(422, f"{exc} (FEDQA_JOBS_MAX_QUESTION_BYTES_PER_KEY; use limit)") from None
        raise HTTPException(
            429,
            f"{exc}: wait for a job to finish or cancel one (FEDQA_JOBS_MAX_QUESTION_BYTES_PER_KEY)",
            headers={"Retry-After": str(JOB_RETRY_AFTER_S)},
        ) from None


def _questions(req: EvaluateRequest, settings: Settings, allowed: frozenset[str] | None) -> list[EvalQuery]:
    """The job's questions (inline, or the named dataset's labelled with the key's products; the first ``limit``),
    each within FEDQA_MAX_QUERY_CHARS, at most FEDQA_JOBS_MAX_QUESTIONS of them; 422 naming what is wrong otherwise."""
    if (req.queries is None) == (req.dataset is None):
        raise HTTPException(422, "give either queries (inline) or dataset (a name), not both or neither")
    try:
        queries = load_dataset(req.dataset, settings.home_dir) if req.dataset is not None else list(req.queries or [])
    except (EvaluationError, LabelError) as exc:
        raise HTTPException(422, f"dataset: {exc}") from None
    unlabelled = [f"queries[{i}] (qid {q.qid or i + 1})" for i, q in enumerate(queries) if "domains" not in q.model_fields_set]
    if unlabelled:  # inline questions only: a dataset's were checked as it was read
        named = ", ".join(unlabelled)
        raise HTTPException(422, f'{len(unlabelled)} of {len(queries)} questions have no "domains" field ({named}); {MISSING_DOMAINS}')
    if req.dataset is not None:
        queries = labelled_within(queries, allowed)
    if req.limit:
        queries = queries[: req.limit]
    if len(queries) > settings.jobs_max_questions:
        raise HTTPException(422, f"{len(queries)} questions; a job holds at most {settings.jobs_max_questions} (FEDQA_JOBS_MAX_QUESTIONS; use limit)")
    for i, q in enumerate(queries):
        if len(q.query) > settings.max_query_chars:
            where = f"queries[{i}].query" if req.dataset is None else f"dataset: question {q.qid or i + 1}"
            raise HTTPException(422, f"{where}: the question is {len(q.query)} characters; the limit is {settings.max_query_chars}")
    return queries


def _owner(caller: ApiKey | None) -> str | None:
    """The creator whose jobs the caller may see (None: every creator's, for an admin key or while keys are off)."""
    return None if caller is None or caller.admin else caller.identity


@router.get("/evaluate", summary="Latest evaluation jobs of the API key (an admin key: every key's), newest first, within its products")
def list_jobs(request: Request, allowed: frozenset[str] | None = Depends(caller_scope), caller: ApiKey | None = Depends(require_api_key)) -> dict:
    jobs = _request_worker(request).store.list(limit=50 if allowed is None else 1000, client=_owner(caller))
    shown = [j for j in jobs if visible(j["spec"].get("scope"), allowed)][:50]
    for j in shown:
        j.pop("client")  # who made it: a digest, the caller's own (or, for an admin, not a thing to hand out)
    return {"jobs": shown}


def _job(request: Request, job_id: str, allowed: frozenset[str] | None, caller: ApiKey | None) -> dict:
    """The job, or 404 (also for a job of another key, unless the caller's is an admin key, and for a job run over
    products the caller's key does not see)."""
    job = _request_worker(request).store.get(job_id)
    owner = _owner(caller)
    if job is None or not visible(job["spec"].get("scope"), allowed) or (owner is not None and job["client"] != owner):
        raise HTTPException(404, f"no evaluation job {job_id!r}")
    return job


@router.get(
    "/evaluate/{job_id}", response_model=EvaluateJob, responses=_ERRORS, summary="Status, progress (done/total) and, when finished, the results"
)
def get_job(
    job_id: str, request: Request, allowed: frozenset[str] | None = Depends(caller_scope), caller: ApiKey | None = Depends(require_api_key)
) -> EvaluateJob:
    return _view(_job(request, job_id, allowed, caller), request)


@router.get(
    "/evaluate/{job_id}/questions",
    responses={**_ERRORS, 200: {"content": {"application/json": {}}, "description": '{"id", "records": [...]}'}},
    summary="Finished per-question results",
)
def job_questions(
    job_id: str, request: Request, allowed: frozenset[str] | None = Depends(caller_scope), caller: ApiKey | None = Depends(require_api_key)
) -> StreamingResponse:
    """``{"id", "records"}``, streamed FEDQA_JOBS_RESULTS_PAGE records at a time: a job of the most questions holds
    some 50,000 records (300-400 MB of JSON), which built whole took several times that in memory."""
    _job(request, job_id, allowed, caller)
    body = questions_body(_request_worker(request).store, job_id, request.app.state.fedqa.settings.jobs_results_page)
    return StreamingResponse(body, media_type="application/json")


@router.get(
    "/evaluate/{job_id}/report", name="evaluation_report", response_class=HTMLResponse, responses=_ERRORS, summary="The HTML report of a finished job"
)
def job_report(
    job_id: str, request: Request, allowed: frozenset[str] | None = Depends(caller_scope), caller: ApiKey | None = Depends(require_api_key)
) -> HTMLResponse:
    job = _job(request, job_id, allowed, caller)
    if job["status"] != "done":
        raise HTTPException(409, f"job {job_id} is {job['status']}; the report comes when it is done")
    return HTMLResponse(render(job["summary"], _request_worker(request).store.results(job_id)))


@router.delete("/evaluate/{job_id}", response_model=EvaluateJob, responses=_ERRORS, summary="Cancel a job")
def cancel(
    job_id: str, request: Request, allowed: frozenset[str] | None = Depends(caller_scope), caller: ApiKey | None = Depends(require_api_key)
) -> EvaluateJob:
    job = _job(request, job_id, allowed, caller)
    if job["status"] in ("queued", "running"):
        _request_worker(request).cancel(job_id)
        job = _job(request, job_id, allowed, caller)
    return _view(job, request)
