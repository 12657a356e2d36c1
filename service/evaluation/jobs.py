"""Evaluation jobs on disk (SQLite, ``$FEDQA_HOME/eval/jobs.sqlite``); the thread that runs them is :mod:`.worker`'s.

Each finished question (one strategy, one question) is committed as its own row the moment it is
done, so a restart, a crash or a ``kill -9`` loses at most the question in flight; on start-up the
worker picks unfinished jobs up again and skips every question already stored. Every method opens
its own connection (WAL mode), so the store is safe across threads and processes.

A job is claimed by one worker (``owner`` = host, pid and a token). While it runs, a heartbeat
thread (:class:`~service.evaluation.worker.Heartbeat`) refreshes the claim every ``STALE_S / 4``
seconds, however long one question takes. A claim is free again when its worker releases it
(graceful stop), when its heartbeat is older than ``STALE_S`` (a crashed or hung process, on any
host), or at once when the owner ran on this host and its process is gone (crash, kill -9).

A job records who asked for it (``client``: a hash of the API key, or of the address when keys are off): the API
shows and cancels a job for that client (or an admin) only, and :meth:`JobStore.create` holds each client to a
:class:`~service.evaluation.quota.JobQuota` (unfinished jobs, finished jobs kept, bytes of stored questions),
deleting the client's oldest finished jobs to make room. A cancelled job drops its questions at once (it never runs again); finished jobs are
also deleted after a retention period (:meth:`JobStore.purge`). A new database is created with
``auto_vacuum=INCREMENTAL`` and every deletion gives its free pages back to the file system, so the file shrinks
after a burst instead of staying at its largest.

A job records the versions that answer it (index, router, retriever, LLM, judge) when it is
created; a resume with other versions would mix two systems in one set of numbers, so the runner
refuses it (see :func:`service.evaluation.runner.run_job`).
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.evaluation.quota import FINAL, JobQuota, delete_jobs, make_room
from service.evaluation.record import QuestionRecord
from service.evaluation.spec import JobQuestion, JobSpec
from service.sqlite import transaction

STALE_S = 120.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT NULL,
    spec TEXT NOT NULL, queries TEXT NOT NULL, total INTEGER NOT NULL, error TEXT, summary TEXT,
    owner TEXT, heartbeat REAL, versions TEXT, client TEXT
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


@dataclass(frozen=True)
class Progress:
    """Questions finished (one strategy, one question each) of a job's total."""

    done: int
    total: int


@dataclass(frozen=True)
class QueuedJob:
    """An unfinished job as the worker picks it: its id and the client that created it."""

    id: str
    client: str | None


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
                c.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file only (before its first table)
                c.execute("PRAGMA journal_mode=WAL")
                c.executescript(_SCHEMA)
                columns = {r["name"] for r in c.execute("PRAGMA table_info(jobs)").fetchall()}
                for column in ("versions", "client"):  # a database from before versions were pinned / clients recorded
                    if column not in columns:
                        c.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
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

    def _conn(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    # ------------------------------------------------------------------ jobs
    def create(
        self,
        spec: JobSpec,
        queries: Sequence[JobQuestion],
        versions: dict[str, Any] | None = None,
        *,
        client: str | None = None,
        quota: JobQuota | None = None,
    ) -> str:
        """A new queued job of ``client``, pinned to ``versions`` (what will answer it); returns its id.

        With a ``quota``: :class:`~service.evaluation.quota.TooManyJobs` when the client already has ``max_unfinished`` jobs queued or running;
        the client's oldest finished jobs are deleted down to ``keep_finished``, and further while its stored questions
        and this job's would pass ``max_question_bytes`` (:class:`~service.evaluation.quota.TooMuchStored` when its unfinished jobs alone would).
        All in one write transaction, so concurrent requests cannot both slip under a bound."""
        job_id = time.strftime("eval-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)
        now = time.time()
        total = len(queries) * len(spec.strategies)
        stored_queries = json.dumps([q.model_dump() for q in queries])
        with self._conn() as c:
            if quota is not None:
                c.execute("BEGIN IMMEDIATE")
                make_room(c, client, quota, len(stored_queries.encode()))
            c.execute(
                "INSERT INTO jobs (id, created, updated, status, spec, queries, total, versions, client) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                (
                    job_id,
                    now,
                    now,
                    json.dumps(spec.stored()),
                    stored_queries,
                    total,
                    json.dumps(versions) if versions else None,
                    client,
                ),
            )
        self._vacuum()
        return job_id

    def purge(self, older_than: float) -> int:
        """Delete the finished jobs (with their results and cache) last changed before ``older_than`` (epoch s)."""
        final = ",".join("?" * len(FINAL))
        with self._conn() as c:
            ids = [r["id"] for r in c.execute(f"SELECT id FROM jobs WHERE status IN ({final}) AND updated < ?", (*FINAL, older_than))]
            delete_jobs(c, ids)
        if ids:
            self._vacuum()
        return len(ids)

    def cancel(self, job_id: str) -> None:
        """Cancel an unfinished job and drop its questions (a cancelled job never runs again; its results stay)."""
        with self._conn() as c:
            c.execute(
                "UPDATE jobs SET status = 'cancelled', queries = '[]', updated = ? WHERE id = ? AND status IN ('queued', 'running')",
                (time.time(), job_id),
            )
        self._vacuum()

    def _vacuum(self) -> None:
        """Give the free pages back to the file system (a database made before auto_vacuum was set keeps reusing them)."""
        with self._conn() as c:
            c.executescript("PRAGMA incremental_vacuum;")  # one page per step: sqlite3_exec steps it to the end

    def holder(self, job_id: str) -> tuple[str | None, str | None]:
        """(status, owner) of a job ((None, None) when there is no such job): a running worker reads whether it still holds it."""
        with self._conn() as c:
            row = c.execute("SELECT status, owner FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return (row["status"], row["owner"]) if row else (None, None)

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
            "client": row["client"],
        }

    def get(self, job_id: str) -> dict[str, Any] | None:
        """A job's status, spec, progress and summary; None when there is no such job."""
        with self._conn() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            done = c.execute("SELECT COUNT(*) FROM results WHERE job_id = ?", (job_id,)).fetchone()[0]
        return self._row(row, done)

    def spec(self, job_id: str) -> JobSpec | None:
        """A job's spec; None when there is no such job."""
        with self._conn() as c:
            row = c.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return JobSpec.model_validate_json(row["spec"]) if row else None

    def queries(self, job_id: str) -> list[JobQuestion]:
        """The questions of a job, as stored when it was created."""
        with self._conn() as c:
            row = c.execute("SELECT queries FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return [JobQuestion.model_validate(q) for q in json.loads(row["queries"])] if row else []

    def list(self, limit: int = 50, client: str | None = None) -> list[dict[str, Any]]:
        """The latest jobs (of ``client`` only, when given), newest first (without their summaries)."""
        where, args = ("WHERE client = ?", (client,)) if client is not None else ("", ())
        with self._conn() as c:
            rows = c.execute(f"SELECT * FROM jobs {where} ORDER BY created DESC LIMIT ?", (*args, limit)).fetchall()
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
                f"UPDATE jobs SET status = ?, error = COALESCE(?, error), updated = ? WHERE id = ? AND status NOT IN ({','.join('?' * len(FINAL))})",
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
        return [j.id for j in self.queued()]

    def queued(self) -> builtins.list[QueuedJob]:
        """The queued or running jobs with their clients, oldest first."""
        with self._conn() as c:
            rows = c.execute("SELECT id, client FROM jobs WHERE status IN ('queued', 'running') ORDER BY created").fetchall()
        return [QueuedJob(r["id"], r["client"]) for r in rows]

    def progress(self, job_id: str) -> Progress:
        """How far a job is (0 of 0 when there is no such job)."""
        with self._conn() as c:
            row = c.execute(
                "SELECT total, (SELECT COUNT(*) FROM results WHERE job_id = ?) AS done FROM jobs WHERE id = ?", (job_id, job_id)
            ).fetchone()
        return Progress(row["done"], row["total"]) if row else Progress(0, 0)

    def others_waiting(self, client: str | None) -> bool:
        """Whether a job of another client than ``client`` is unfinished and held by no worker."""
        with self._conn() as c:
            row = c.execute(
                "SELECT 1 FROM jobs WHERE status IN ('queued', 'running') AND owner IS NULL AND client IS NOT ? LIMIT 1", (client,)
            ).fetchone()
        return row is not None

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

    def requeue(self, job_id: str, owner: str) -> None:
        """A running job of ``owner`` back in the queue, unclaimed (it paused to let another client's job run)."""
        with self._conn() as c:
            c.execute("UPDATE jobs SET status = 'queued', owner = NULL WHERE id = ? AND owner = ? AND status = 'running'", (job_id, owner))

    # ---------------------------------------------------------------- results
    def save_result(self, job_id: str, record: QuestionRecord) -> None:
        """Commit one finished question (and refresh the job's heartbeat); its row is keyed by the record's strategy,
        qid and position, and holds the record's JSON (:meth:`QuestionRecord.stored`)."""
        now = time.time()
        with self._conn() as c:
            c.execute(
                "INSERT OR REPLACE INTO results (job_id, strategy, qid, position, record) VALUES (?, ?, ?, ?, ?)",
                (job_id, str(record.strategy), record.qid, record.position, json.dumps(record.stored())),
            )
            c.execute("UPDATE jobs SET heartbeat = ?, updated = ? WHERE id = ?", (now, now, job_id))

    def done_keys(self, job_id: str) -> set[tuple[str, str]]:
        """(strategy, qid) of the finished questions."""
        with self._conn() as c:
            rows = c.execute("SELECT strategy, qid FROM results WHERE job_id = ?", (job_id,)).fetchall()
        return {(r["strategy"], r["qid"]) for r in rows}

    def results(self, job_id: str, after: tuple[int, str, str] = (-1, "", ""), limit: int = -1) -> builtins.list[QuestionRecord]:
        """Finished per-question records, in question order then strategy (then qid): those past ``after`` (a record's
        position, strategy and qid), at most ``limit`` of them (-1: all)."""
        sql = "SELECT record FROM results WHERE job_id = ? AND (position, strategy, qid) > (?, ?, ?) ORDER BY position, strategy, qid LIMIT ?"
        with self._conn() as c:
            rows = c.execute(sql, (job_id, *after, limit)).fetchall()
        return [QuestionRecord.model_validate_json(r["record"]) for r in rows]

    def cache_get(self, job_id: str, key: str) -> Any | None:
        with self._conn() as c:
            row = c.execute("SELECT value FROM cache WHERE job_id = ? AND key = ?", (job_id, key)).fetchone()
        return json.loads(row["value"]) if row else None

    def cache_set(self, job_id: str, key: str, value: Any) -> None:
        with self._conn() as c:
            c.execute("INSERT OR REPLACE INTO cache (job_id, key, value) VALUES (?, ?, ?)", (job_id, key, json.dumps(value)))
