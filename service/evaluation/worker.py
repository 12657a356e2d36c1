"""The worker thread that runs evaluation jobs one at a time, and the heartbeat that keeps a running job's claim.

The jobs, their results and the claims live in :class:`~service.evaluation.jobs.JobStore`; a claim goes
stale ``STALE_S`` (:mod:`service.evaluation.jobs`) after its last heartbeat.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

from service.evaluation import jobs
from service.evaluation.jobs import JobStore, owner_id

log = logging.getLogger("fedqa.evaluation")


class Heartbeat:
    """A thread refreshing a claim every ``STALE_S / 4`` seconds while a job runs (``with Heartbeat(...):``)."""

    def __init__(self, store: JobStore, job_id: str, owner: str) -> None:
        self.store, self.job_id, self.owner = store, job_id, owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fedqa-eval-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(jobs.STALE_S / 4):
            try:
                self.store.heartbeat(self.job_id, self.owner)
            except sqlite3.Error:  # a busy database: the next beat tries again
                log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)

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
        """Cancel a job (it stops after the question in flight)."""
        self._cancelled.add(job_id)
        self.store.set_status(job_id, "cancelled")

    def _should_stop(self, job_id: str) -> Callable[[], bool]:
        def check() -> bool:
            return self._stop.is_set() or job_id in self._cancelled

        return check

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._ready():
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            job_id = next((j for j in self.store.unfinished() if self.store.claim(j, self.owner)), None)
            if job_id is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            self.current = job_id
            try:
                with Heartbeat(self.store, job_id, self.owner):
                    self._run(job_id, self._should_stop(job_id))
            except Exception as exc:  # a bug or a store failure: the job fails visibly, the worker goes on
                log.exception("evaluation job %s failed", job_id)
                self.store.set_status(job_id, "failed", error=f"{type(exc).__name__}: {exc}")
            finally:
                self.store.release(job_id, self.owner)
                self.current = None
