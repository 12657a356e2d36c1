"""What one client's evaluation jobs may hold in the jobs database (:class:`JobQuota`), and the deletions that keep
it there; :meth:`service.evaluation.jobs.JobStore.create` applies them in its write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

FINAL = ("done", "failed", "cancelled")


class TooManyJobs(RuntimeError):
    """A client already has as many unfinished jobs as it may (``limit``)."""

    def __init__(self, unfinished: int, limit: int) -> None:
        super().__init__(f"{unfinished} evaluation jobs of this client are queued or running; the limit is {limit}")
        self.unfinished, self.limit = unfinished, limit


class TooMuchStored(RuntimeError):
    """A client's jobs would store more bytes of questions than it may (``limit``), even without its finished jobs."""

    def __init__(self, stored: int, asked: int, limit: int) -> None:
        super().__init__(
            f"this job's questions take {asked} bytes and this client's unfinished jobs already store {stored}; the limit is {limit} bytes"
        )
        self.stored, self.asked, self.limit = stored, asked, limit


@dataclass(frozen=True)
class JobQuota:
    """What one client's jobs may hold (None: no bound): jobs queued or running, finished jobs kept (the oldest
    beyond it are deleted when it creates a job), and bytes of stored questions over all its jobs."""

    max_unfinished: int | None = None
    keep_finished: int | None = None
    max_question_bytes: int | None = None


def make_room(c: sqlite3.Connection, client: str | None, quota: JobQuota, asked: int) -> None:
    """Hold ``client`` to ``quota`` before a job of ``asked`` bytes of questions is added, in the caller's write
    transaction (see :meth:`~service.evaluation.jobs.JobStore.create`)."""
    final = ",".join("?" * len(FINAL))
    if quota.max_unfinished is not None:
        unfinished = c.execute("SELECT COUNT(*) FROM jobs WHERE client IS ? AND status IN ('queued', 'running')", (client,)).fetchone()[0]
        if unfinished >= quota.max_unfinished:
            raise TooManyJobs(unfinished, quota.max_unfinished)
    finished = c.execute(
        f"SELECT id, length(CAST(queries AS BLOB)) AS size FROM jobs WHERE client IS ? AND status IN ({final}) ORDER BY updated DESC",
        (client, *FINAL),
    ).fetchall()
    doomed = [r["id"] for r in finished[quota.keep_finished :]] if quota.keep_finished is not None else []
    kept = finished[: len(finished) - len(doomed)]
    if quota.max_question_bytes is not None:
        unfinished_bytes = c.execute(
            "SELECT COALESCE(SUM(length(CAST(queries AS BLOB))), 0) FROM jobs WHERE client IS ? AND status IN ('queued', 'running')", (client,)
        ).fetchone()[0]
        if unfinished_bytes + asked > quota.max_question_bytes:
            raise TooMuchStored(unfinished_bytes, asked, quota.max_question_bytes)
        stored = unfinished_bytes + sum(r["size"] for r in kept)
        while kept and stored + asked > quota.max_question_bytes:
            oldest = kept.pop()
            stored -= oldest["size"]
            doomed.append(oldest["id"])
    delete_jobs(c, doomed)


def delete_jobs(c: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Delete jobs with their results and cache, in the caller's transaction."""
    for table, column in (("results", "job_id"), ("cache", "job_id"), ("jobs", "id")):
        c.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(i,) for i in ids])
