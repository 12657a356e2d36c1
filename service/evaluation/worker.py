"""The worker thread that runs evaluation jobs one at a time, and the heartbeat that keeps a running job's claim.

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
import sqlite3
import threading
import time
from collections.abc import Callable

from service.evaluation import jobs
from service.evaluation.jobs import JobStore, owner_id

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


class EvalWorker:
    """Runs queued jobs one at a time in a background thread; resumes unfinished ones on start."""

    def __init__(self, store: JobStore, run: Callable[[str, Callable[[], bool]], None], ready: Callable[[], bool] = lambda: True) -> None:
        """``run(job_id, should_stop)`` evaluates one job (see :func:`service.evaluation.runner.run_job`);
        ``ready()`` says whether jobs can run now (the pipeline is loaded)."""
        self.store = store
        self._run = run
        self._ready = ready
        self.owner = owner_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._cancelled: set[str] = set()
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
        """Look for queued jobs now."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the question in flight; the job stays unfinished and resumes on the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def cancel(self, job_id: str) -> None:
        """Cancel a job: it stops after the question in flight, in whichever process sharing the store runs it."""
        self._cancelled.add(job_id)
        self.store.set_status(job_id, "cancelled")

    def _should_stop(self, claim: Claim) -> Callable[[], bool]:
        def check() -> bool:
            return self._stop.is_set() or claim.job_id in self._cancelled or not claim.check()

        return check

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

    def _run_next(self) -> bool:
        """Claim and run the oldest unfinished job; False when there was none to claim."""
        job_id = next((j for j in self.store.unfinished() if self.store.claim(j, self.owner)), None)
        if job_id is None:
            return False
        self.current = job_id
        claim = Claim(self.store, job_id, self.owner)
        try:
            with Heartbeat(self.store, job_id, self.owner, claim):
                self._run(job_id, self._should_stop(claim))
        except sqlite3.Error:  # the jobs database, not the job: it stays unfinished (resumed from its last stored
            raise  # question) and the loop waits RETRY_S before it tries again
        except Exception as exc:  # a bug or a store failure: the job fails visibly, the worker goes on
            log.exception("evaluation job %s failed", job_id)
            if not claim.lost:
                self.store.set_status(job_id, "failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.current = None
            self.store.release(job_id, self.owner)
        return True
