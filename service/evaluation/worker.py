"""The worker thread that runs evaluation jobs one at a time, and the heartbeat that keeps a running job's claim.

The worker shares itself fairly between clients (the API keys that created the jobs): it picks the oldest job of
the client it served least recently, and a job that has run ``slice_s`` seconds pauses after the question in
flight as soon as another client's job waits (it goes back to the queue, its finished questions kept, and resumes
from there on its next turn). A paused job keeps what :class:`Turn` says about it (``yielded``), so the caller can
hold on to the pipeline it started with; ``forget(job_id)`` tells it when a paused job will not come back here.

The jobs, their results and the claims live in :class:`~service.evaluation.jobs.JobStore`; a claim goes
stale ``STALE_S`` (:mod:`service.evaluation.jobs`) after its last heartbeat.

A running job stops after the question in flight when the store says it is no longer this worker's (it was
cancelled, by any process sharing the store, or another worker took it over after this one paused longer
than ``STALE_S``): the job's ``should_stop`` reads its status and owner at most every ``CLAIM_POLL_S``.
A failing database call (e.g. "database is locked" past SQLite's busy timeout) never ends the worker
thread: it is logged and the loop tries again.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

from service.evaluation import jobs
from service.evaluation.jobs import JobStore, QueuedJob, owner_id

log = logging.getLogger("fedqa.evaluation")

CLAIM_POLL_S = 1.0  # how often a running job reads from the store whether it is still this worker's
RETRY_S = 1.0  # the loop's pause when idle or after a database error


class Claim:
    """Whether a running job is still this worker's: not cancelled, still claimed by ``owner`` (read from the store)."""

    def __init__(self, store: JobStore, job_id: str, owner: str) -> None:
        self.store, self.job_id, self.owner = store, job_id, owner
        self.lost = False
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def lose(self, why: str) -> None:
        if not self.lost:
            log.warning("evaluation job %s stops: %s", self.job_id, why)
        self.lost = True

    def check(self) -> bool:
        """True while the job is this worker's (reads the store when the last read is ``CLAIM_POLL_S`` old)."""
        with self._lock:
            if self.lost or time.monotonic() - self._checked < CLAIM_POLL_S:
                return not self.lost
            self._checked = time.monotonic()
            try:
                status, holder = self.store.holder(self.job_id)
            except sqlite3.Error:  # a busy database: the next check reads again
                return True
            if status != "running":
                self.lose(f"it is {status or 'gone'}")
            elif holder != self.owner:
                self.lose(f"another worker holds it ({holder})")
            return not self.lost


class Heartbeat:
    """A thread refreshing a claim every ``STALE_S / 4`` seconds while a job runs (``with Heartbeat(...):``)."""

    def __init__(self, store: JobStore, job_id: str, owner: str, claim: Claim | None = None) -> None:
        self.store, self.job_id, self.owner = store, job_id, owner
        self.claim = claim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fedqa-eval-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(jobs.STALE_S / 4):
            try:
                held = self.store.heartbeat(self.job_id, self.owner)
            except sqlite3.Error:  # a busy database: the next beat tries again
                log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)
                continue
            if not held and self.claim is not None:
                self.claim.lose("its claim was taken over")
                return

    def __enter__(self) -> Heartbeat:
        self.store.heartbeat(self.job_id, self.owner)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Turn:
    """A running job's ``should_stop`` (``turn()``, between questions): true when the worker stops, the job was
    cancelled or taken over, or its slice is spent while another client's job waits (then ``yielded`` is set). A turn
    yields only once it has finished a question, and never with none left, so two clients' jobs cannot pass the
    worker back and forth without either getting on."""

    def __init__(self, worker: EvalWorker, claim: Claim, client: str | None) -> None:
        self.worker, self.claim, self.client = worker, claim, client
        self.yielded = False
        self._started = time.monotonic()
        self._looked = -math.inf  # when the store was last asked whether to yield
        self._done_before: float
        try:
            self._done_before = worker.store.progress(claim.job_id).done
        except sqlite3.Error:  # a busy database: this turn runs without giving way (its claim is still released)
            self._done_before = math.inf

    def __call__(self) -> bool:
        w = self.worker
        if w._stop.is_set() or self.claim.job_id in w._cancelled or not self.claim.check():
            return True
        now = time.monotonic()
        due = w._arrived.is_set() or now - self._looked >= CLAIM_POLL_S  # a job was just created here, or it is time to look
        if self.yielded or (now - self._started >= w.slice_s and due and self._give_way(now)):
            self.yielded = True
        return self.yielded

    def _give_way(self, now: float) -> bool:
        """Whether this turn got somewhere, has more to do, and another client's job waits."""
        self._looked = now
        try:
            progress = self.worker.store.progress(self.claim.job_id)
            if not self._done_before < progress.done < progress.total:
                return False  # a job that arrived meanwhile is looked for again after the next question
            self.worker._arrived.clear()
            return self.worker.store.others_waiting(self.client)
        except sqlite3.Error:  # a busy database: the next question asks again
            return False


class EvalWorker:
    """Runs queued jobs one at a time in a background thread, fairly between clients; resumes unfinished ones on start."""

    def __init__(
        self,
        store: JobStore,
        run: Callable[[str, Turn], None],
        ready: Callable[[], bool] = lambda: True,
        *,
        slice_s: float = math.inf,
        forget: Callable[[str], None] = lambda job_id: None,
    ) -> None:
        """``run(job_id, should_stop)`` evaluates one job (see :func:`service.evaluation.runner.run_job`; ``should_stop``
        is a :class:`Turn`); ``ready()`` says whether jobs can run now (the pipeline is loaded). ``slice_s``: seconds a
        job runs before it pauses for another client's waiting job (FEDQA_JOBS_SLICE_S); ``forget(job_id)``: a job that
        paused (``Turn.yielded``) will not resume in this worker (it finished elsewhere, was cancelled, or the worker stops)."""
        self.store = store
        self._run = run
        self._ready = ready
        self.slice_s = slice_s
        self._forget = forget
        self.owner = owner_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._arrived = threading.Event()  # a job was created in this process since a running job last looked
        self._cancelled: set[str] = set()
        self._paused: set[str] = set()
        self._served: dict[str | None, float] = {}  # client -> when one of its jobs last got the worker
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.current: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (no-op when it runs)."""
        with self._lock:
            if self.running:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="fedqa-eval", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look for queued jobs now (a running job looks whether to give way at its next question)."""
        self._arrived.set()
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the question in flight; the job stays unfinished and resumes on the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if not self.running:
            self._drop_paused(())

    def cancel(self, job_id: str) -> None:
        """Cancel a job: it stops after the question in flight, in whichever process sharing the store runs it."""
        self._cancelled.add(job_id)
        self.store.cancel(job_id)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ran = self._ready() and self._run_next()
            except sqlite3.Error:  # e.g. "database is locked": the thread lives on and tries again
                log.warning("evaluation worker: the jobs database failed; trying again in %.0f s", RETRY_S, exc_info=True)
                ran = False
            if not ran:
                self._wake.wait(RETRY_S)
                self._wake.clear()

    def _fair(self, queued: Sequence[QueuedJob]) -> list[QueuedJob]:
        """The jobs in the order to try them: the client served least recently first, each client's oldest first."""
        return sorted(queued, key=lambda j: self._served.get(j.client, -math.inf))  # stable: oldest first within a client

    def _drop_paused(self, unfinished: Sequence[QueuedJob]) -> None:
        """Forget the paused jobs that are no longer unfinished (all of them when ``unfinished`` is empty)."""
        alive = {j.id for j in unfinished}
        for job_id in [j for j in self._paused if j not in alive]:
            self._paused.discard(job_id)
            self._forget(job_id)

    def _run_next(self) -> bool:
        """Claim and run the next unfinished job (:meth:`_fair`); False when there was none to claim."""
        queued = self.store.queued()
        self._drop_paused(queued)
        job = next((j for j in self._fair(queued) if self.store.claim(j.id, self.owner)), None)
        if job is None:
            return False
        self.current, self._served[job.client] = job.id, time.monotonic()
        claim = Claim(self.store, job.id, self.owner)
        turn = Turn(self, claim, job.client)
        try:
            with Heartbeat(self.store, job.id, self.owner, claim):
                self._run(job.id, turn)
        except sqlite3.Error:  # the jobs database, not the job: it stays unfinished (resumed from its last stored
            raise  # question) and the loop waits RETRY_S before it tries again
        except Exception as exc:  # a bug or a store failure: the job fails visibly, the worker goes on
            log.exception("evaluation job %s failed", job.id)
            if not claim.lost:
                self.store.set_status(job.id, "failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.current = None
            if turn.yielded and not claim.lost:
                self._paused.add(job.id)
                self.store.requeue(job.id, self.owner)
                log.info("evaluation job %s pauses: another client's job waits", job.id)
            else:
                self._paused.discard(job.id)
            self.store.release(job.id, self.owner)
        return True
