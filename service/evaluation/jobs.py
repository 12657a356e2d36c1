"""Evaluation jobs on disk (SQLite, ``$FEDQA_HOME/eval/jobs.sqlite``) and the worker thread that runs them.

Each finished question (one strategy, one question) is committed as its own row the moment it is
done, so a restart, a crash or a ``kill -9`` loses at most the question in flight; on start-up the
worker picks unfinished jobs up again and skips every question already stored. Every method opens
its own connection (WAL mode), so the store is safe across threads and processes.

A job is claimed by one worker (``owner`` = host, pid and a token). While it runs, a
:class:`Heartbeat` thread refreshes the claim every ``STALE_S / 4`` seconds, however long one
question takes. A claim is free again when its worker releases it (graceful stop), when its
heartbeat is older than ``STALE_S`` (a crashed or hung process, on any host), or at once when the
owner ran on this host and its process is gone (crash, kill -9).

A job records the versions that answer it (index, router, retriever, LLM, judge) when it is
created; a resume with other versions would mix two systems in one set of numbers, so the runner
refuses it (see :func:`service.evaluation.runner.run_job`).
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("fedqa.evaluation")

STALE_S = 120.0
FINAL = ("done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT NULL,
    spec TEXT NOT NULL, queries TEXT NOT NULL, total INTEGER NOT NULL, error TEXT, summary TEXT,
    owner TEXT, heartbeat REAL, versions TEXT
);
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT NOT NULL, strategy TEXT NOT NULL, qid TEXT NOT NULL, position INTEGER NOT NULL,
    record TEXT NOT NULL, PRIMARY KEY (job_id, strategy, qid)
);
CREATE TABLE IF NOT EXISTS cache (
    job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (job_id, key)
);
"""


class JobStoreUnavailable(RuntimeError):
    """The jobs database cannot be created or written (e.g. a read-only home)."""


def owner_id(tag: str | None = None) -> str:
    """A claim owner: ``host:pid:token`` (the host lets the liveness check tell local processes from remote ones)."""
    return f"{socket.gethostname()}:{os.getpid()}:{tag or secrets.token_hex(4)}"


def _holder_alive(holder: str, heartbeat: float | None, now: float) -> bool:
    """Whether a claim's owner still runs: a fresh heartbeat, and (on this host) a live process."""
    fresh = heartbeat is not None and now - heartbeat < STALE_S
    parts = holder.split(":")
    host, pid = (parts[0], parts[1]) if len(parts) >= 3 else (socket.gethostname(), parts[0])
    if host != socket.gethostname() or not pid.isdigit():
        return fresh  # another host: only its heartbeat can tell
    return fresh and _pid_alive(int(pid))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobStore:
    """Jobs, their per-question results and a small per-job cache (e.g. key points) in one SQLite file."""

    def __init__(self, path: Path) -> None:
        """Open (creating) the database; :class:`JobStoreUnavailable` when it cannot be written."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as c:
                c.execute("PRAGMA journal_mode=WAL")
                c.executescript(_SCHEMA)
                columns = {r["name"] for r in c.execute("PRAGMA table_info(jobs)").fetchall()}
                if "versions" not in columns:  # a database from before versions were pinned
                    c.execute("ALTER TABLE jobs ADD COLUMN versions TEXT")
                c.execute("CREATE TABLE IF NOT EXISTS _probe (x INTEGER)")  # a read-only file fails here
                c.execute("DROP TABLE IF EXISTS _probe")
        except (OSError, sqlite3.Error) as exc:
            raise JobStoreUnavailable(
                f"cannot write the evaluation jobs database {self.path}: {exc}; set FEDQA_JOBS_DB to a writable local path"
            ) from exc

    @classmethod
    def for_home(cls, home: Path) -> JobStore:
        """The store of a data home (its default location)."""
        return cls(Path(home).expanduser() / "eval" / "jobs.sqlite")

    @classmethod
    def for_settings(cls, settings: Any) -> JobStore:
        """The store the settings name (FEDQA_JOBS_DB, else under FEDQA_HOME)."""
        return cls(settings.jobs_path)

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(str(self.path), timeout=30.0)
        conn.row_factory = sqlite3.Row
        try:
            with conn:  # commit, or roll back on error
                yield conn
        finally:
            conn.close()

    # ------------------------------------------------------------------ jobs
    def create(self, spec: dict[str, Any], queries: list[dict[str, Any]], versions: dict[str, Any] | None = None) -> str:
        """A new queued job, pinned to ``versions`` (what will answer it); returns its id."""
        job_id = time.strftime("eval-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)
        now = time.time()
        total = len(queries) * len(spec["strategies"])
        with self._conn() as c:
            c.execute(
                "INSERT INTO jobs (id, created, updated, status, spec, queries, total, versions) "
                "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?)",
                (job_id, now, now, json.dumps(spec), json.dumps(queries), total, json.dumps(versions) if versions else None),
            )
        return job_id

    def versions(self, job_id: str) -> dict[str, Any] | None:
        """The versions a job is pinned to (None: not pinned yet)."""
        with self._conn() as c:
            row = c.execute("SELECT versions FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return json.loads(row["versions"]) if row and row["versions"] else None

    def pin(self, job_id: str, versions: dict[str, Any]) -> None:
        """Pin a job to ``versions`` (used when no result exists yet, or when a job restarts)."""
        with self._conn() as c:
            c.execute("UPDATE jobs SET versions = ? WHERE id = ?", (json.dumps(versions), job_id))

    def clear_results(self, job_id: str) -> None:
        """Drop a job's finished questions and cached judge outputs (a restart from scratch)."""
        with self._conn() as c:
            c.execute("DELETE FROM results WHERE job_id = ?", (job_id,))
            c.execute("DELETE FROM cache WHERE job_id = ?", (job_id,))

    def _row(self, row: sqlite3.Row, done: int) -> dict[str, Any]:
        return {
            "id": row["id"],
            "status": row["status"],
            "created": row["created"],
            "updated": row["updated"],
            "spec": json.loads(row["spec"]),
            "progress": {"done": done, "total": row["total"]},
            "error": row["error"],
            "summary": json.loads(row["summary"]) if row["summary"] else None,
        }

    def get(self, job_id: str) -> dict[str, Any] | None:
        """A job's status, spec, progress and summary; None when there is no such job."""
        with self._conn() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            done = c.execute("SELECT COUNT(*) FROM results WHERE job_id = ?", (job_id,)).fetchone()[0]
        return self._row(row, done)

    def queries(self, job_id: str) -> list[dict[str, Any]]:
        """The questions of a job, as stored when it was created."""
        with self._conn() as c:
            row = c.execute("SELECT queries FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return json.loads(row["queries"]) if row else []

    def list(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest jobs, newest first (without their summaries)."""
        with self._conn() as c:
            rows = c.execute("SELECT * FROM jobs ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
            counts = dict(c.execute("SELECT job_id, COUNT(*) FROM results GROUP BY job_id").fetchall())
        out = []
        for r in rows:
            d = self._row(r, counts.get(r["id"], 0))
            d.pop("summary")
            out.append(d)
        return out

    def set_status(self, job_id: str, status: str, error: str | None = None) -> None:
        """Change a job's status (a final status is never left again)."""
        with self._conn() as c:
            c.execute(
                f"UPDATE jobs SET status = ?, error = COALESCE(?, error), updated = ? WHERE id = ? "
                f"AND status NOT IN ({','.join('?' * len(FINAL))})",
                (status, error, time.time(), job_id, *FINAL),
            )

    def finish(self, job_id: str, summary: dict[str, Any]) -> None:
        """Store the summary and mark the job done (unless it was cancelled meanwhile)."""
        with self._conn() as c:
            c.execute(
                "UPDATE jobs SET status = 'done', summary = ?, updated = ?, owner = NULL WHERE id = ? AND status != 'cancelled'",
                (json.dumps(summary), time.time(), job_id),
            )

    def unfinished(self) -> builtins.list[str]:  # builtins: the class has a method named list
        """Ids of queued or running jobs, oldest first."""
        with self._conn() as c:
            rows = c.execute("SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY created").fetchall()
        return [r["id"] for r in rows]

    # ----------------------------------------------------------------- claims
    def claim(self, job_id: str, owner: str) -> bool:
        """Take a queued or running job for ``owner`` (:func:`owner_id`); False when another live worker holds it."""
        now = time.time()
        with self._conn() as c:
            row = c.execute("SELECT status, owner, heartbeat FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["status"] not in ("queued", "running"):
                return False
            holder = row["owner"]
            if holder and holder != owner and _holder_alive(holder, row["heartbeat"], now):
                return False
            # Conditional on what was read, so a cancel (or another worker) in between wins.
            cur = c.execute(
                "UPDATE jobs SET owner = ?, heartbeat = ?, status = 'running', updated = ? "
                "WHERE id = ? AND status IN ('queued', 'running') AND COALESCE(owner, '') = ?",
                (owner, now, now, job_id, holder or ""),
            )
            if cur.rowcount != 1:
                return False
        return True

    def heartbeat(self, job_id: str, owner: str) -> bool:
        """Refresh ``owner``'s claim; False when it no longer holds the job."""
        with self._conn() as c:
            cur = c.execute("UPDATE jobs SET heartbeat = ? WHERE id = ? AND owner = ?", (time.time(), job_id, owner))
        return cur.rowcount == 1

    def release(self, job_id: str, owner: str) -> None:
        """Give a claim back (the job stays unfinished and is resumed by the next worker)."""
        with self._conn() as c:
            c.execute("UPDATE jobs SET owner = NULL WHERE id = ? AND owner = ?", (job_id, owner))

    # ---------------------------------------------------------------- results
    def save_result(self, job_id: str, strategy: str, qid: str, position: int, record: dict[str, Any]) -> None:
        """Commit one finished question (and refresh the job's heartbeat)."""
        now = time.time()
        with self._conn() as c:
            c.execute(
                "INSERT OR REPLACE INTO results (job_id, strategy, qid, position, record) VALUES (?, ?, ?, ?, ?)",
                (job_id, strategy, qid, position, json.dumps(record)),
            )
            c.execute("UPDATE jobs SET heartbeat = ?, updated = ? WHERE id = ?", (now, now, job_id))

    def done_keys(self, job_id: str) -> set[tuple[str, str]]:
        """(strategy, qid) of the finished questions."""
        with self._conn() as c:
            rows = c.execute("SELECT strategy, qid FROM results WHERE job_id = ?", (job_id,)).fetchall()
        return {(r["strategy"], r["qid"]) for r in rows}

    def results(self, job_id: str) -> builtins.list[dict[str, Any]]:
        """Finished per-question records, in question order then strategy."""
        with self._conn() as c:
            rows = c.execute(
                "SELECT record FROM results WHERE job_id = ? ORDER BY position, strategy", (job_id,)
            ).fetchall()
        return [json.loads(r["record"]) for r in rows]

    def cache_get(self, job_id: str, key: str) -> Any | None:
        with self._conn() as c:
            row = c.execute("SELECT value FROM cache WHERE job_id = ? AND key = ?", (job_id, key)).fetchone()
        return json.loads(row["value"]) if row else None

    def cache_set(self, job_id: str, key: str, value: Any) -> None:
        with self._conn() as c:
            c.execute("INSERT OR REPLACE INTO cache (job_id, key, value) VALUES (?, ?, ?)", (job_id, key, json.dumps(value)))


class Heartbeat:
    """A thread refreshing a claim every ``STALE_S / 4`` seconds while a job runs (``with Heartbeat(...):``)."""

    def __init__(self, store: JobStore, job_id: str, owner: str) -> None:
        self.store, self.job_id, self.owner = store, job_id, owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fedqa-eval-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(STALE_S / 4):
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

    def __init__(
        self, store: JobStore, run: Callable[[str, Callable[[], bool]], None], ready: Callable[[], bool] = lambda: True
    ) -> None:
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
