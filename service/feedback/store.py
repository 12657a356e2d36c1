"""Feedback on disk (SQLite, ``$FEDQA_HOME/feedback/feedback.sqlite``, WAL mode, one connection per call, so safe
across threads and processes, as the evaluation jobs' store).

One row per key, question (normalised: :func:`normalise`) and passage: a key's repeated votes on them update that
row (its latest word, and how many times it was sent), so one caller voting 30 times is one vote. Each row keeps the
time, the key's name (never the key) and products, whether the key is trusted, the index version in service, the
question as sent, the rating, the passage, "not covered" and a comment. Every write also applies the bounds
(:class:`FeedbackBounds`): rows older than the retention are deleted, and a key past its row count loses its oldest.

The same file keeps the chat completions (:class:`Completion`: the question a completion answered, its key and the
sources it showed), so that ``POST /feedback`` can take a completion id instead of the question; they are bounded as
the votes are (by age, and per key).

:mod:`service.feedback.review` turns stored feedback into labelled questions: the service serves them as known answers
at once (:func:`service.loading.learn_feedback`), and ``fedqa refresh`` fits on them (:mod:`training.refresh_feedback`).
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import time
import unicodedata
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from service.choices import Choice
from service.config import Settings
from service.generation.modes import AnswerMode
from service.sqlite import transaction


class Rating(Choice):
    """What a rating says of a passage: it answered the question (up) or it did not (down)."""

    UP = "up"
    DOWN = "down"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, times INTEGER NOT NULL,
    key_name TEXT NOT NULL, key_products TEXT, trusted INTEGER NOT NULL, index_version TEXT,
    query TEXT NOT NULL, norm TEXT NOT NULL, rating TEXT, doc_id TEXT NOT NULL, domain TEXT,
    not_covered INTEGER NOT NULL, comment TEXT, UNIQUE (key_name, norm, doc_id)
);
CREATE INDEX IF NOT EXISTS votes_updated ON votes (updated);
CREATE INDEX IF NOT EXISTS votes_key ON votes (key_name, updated);
CREATE TABLE IF NOT EXISTS completions (
    id TEXT PRIMARY KEY, created REAL NOT NULL, key_name TEXT NOT NULL, key_products TEXT, index_version TEXT,
    question TEXT NOT NULL, answer_mode TEXT NOT NULL, doc_ids TEXT NOT NULL, answer_doc_id TEXT
);
CREATE INDEX IF NOT EXISTS completions_created ON completions (created);
CREATE INDEX IF NOT EXISTS completions_key ON completions (key_name, created);
"""

_UPSERT = """
INSERT INTO votes (id, created, updated, times, key_name, key_products, trusted, index_version, query, norm, rating,
                   doc_id, domain, not_covered, comment)
VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key_name, norm, doc_id) DO UPDATE SET
    updated = excluded.updated, times = times + 1, key_products = excluded.key_products, trusted = excluded.trusted,
    index_version = excluded.index_version, query = excluded.query, rating = excluded.rating, domain = excluded.domain,
    not_covered = excluded.not_covered, comment = COALESCE(excluded.comment, comment)
RETURNING id
"""


class FeedbackStoreUnavailable(RuntimeError):
    """The feedback database cannot be created or written (e.g. a read-only home)."""


def normalise(query: str) -> str:
    """A question as feedback counts it: Unicode-normalised, case-folded, spaces collapsed, end punctuation dropped
    (``"How do I  refund?"`` and ``"how do i refund"`` are one question)."""
    text = " ".join(unicodedata.normalize("NFKC", query).casefold().split())
    return re.sub(r"[\s?!.;:,]+$", "", text)


@dataclass(frozen=True)
class FeedbackBounds:
    """What the store keeps: rows last sent within ``keep_days`` (0: forever), at most ``max_per_key`` per key."""

    keep_days: float
    max_per_key: int

    @classmethod
    def of(cls, settings: Settings) -> FeedbackBounds:
        """The bounds the settings set (FEDQA_FEEDBACK_KEEP_DAYS, FEDQA_FEEDBACK_MAX_PER_KEY)."""
        return cls(settings.feedback_keep_days, settings.feedback_max_per_key)

    def cutoff(self, now: float) -> float | None:
        """Rows last sent before this time (epoch s) have expired; None: none expire."""
        return now - self.keep_days * 86400.0 if self.keep_days > 0 else None


@dataclass(frozen=True)
class Vote:
    """One piece of feedback as received: who sent it (key name, its products: None for every product, whether it
    is trusted), what was in service, and what it says."""

    query: str
    key_name: str
    key_products: tuple[str, ...] | None
    trusted: bool
    index_version: str | None
    rating: Rating | None = None
    doc_id: str | None = None
    domain: str | None = None  # the product of doc_id in that index version
    not_covered: bool = False
    comment: str | None = None

    @property
    def norm(self) -> str:
        """The question as feedback counts it (:func:`normalise`)."""
        return normalise(self.query)


@dataclass(frozen=True)
class Completion:
    """A chat completion as feedback by its id needs it: the question it answered, the key that asked (name, products)
    and the sources it showed (``doc_ids``, in order; ``answer_doc_id``: the one its answer quoted first)."""

    id: str
    key_name: str
    key_products: tuple[str, ...] | None
    index_version: str | None
    question: str
    answer_mode: AnswerMode
    doc_ids: tuple[str, ...]
    answer_doc_id: str | None = None

    @property
    def refused(self) -> bool:
        """The answer was "not covered"."""
        return self.answer_mode == AnswerMode.NOT_COVERED


@dataclass(frozen=True)
class StoredVote:
    """A stored row: the key's latest :class:`Vote` on a question and passage, its id, when it was first and last
    sent, and how many times."""

    id: str
    vote: Vote
    created: float
    updated: float
    times: int


class FeedbackStore:
    """The feedback rows of one SQLite file (created at the first write; reading a missing file reads nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ready = False

    def _conn(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def _create(self) -> None:
        if self._ready:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as c:
                c.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file only (before its first table)
                c.execute("PRAGMA journal_mode=WAL")
                c.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise FeedbackStoreUnavailable(f"cannot write the feedback database {self.path}: {exc}") from exc
        self._ready = True

    def record(self, vote: Vote, bounds: FeedbackBounds, now: float | None = None) -> str:
        """Store ``vote`` (the key's earlier vote on the same question and passage is replaced, keeping its id) and
        apply ``bounds``, in one write transaction; returns the row's id."""
        self._create()
        now = time.time() if now is None else now
        row = _row(vote, now)
        try:
            with self._conn() as c:
                c.execute("BEGIN IMMEDIATE")
                cutoff = bounds.cutoff(now)
                deleted = c.execute("DELETE FROM votes WHERE updated < ?", (cutoff,)).rowcount if cutoff is not None else 0
                vote_id = str(c.execute(_UPSERT, row).fetchone()[0])
                deleted += self._trim(c, vote.key_name, bounds.max_per_key)
            if deleted:
                with self._conn() as c:
                    c.executescript("PRAGMA incremental_vacuum;")
        except sqlite3.Error as exc:
            raise FeedbackStoreUnavailable(f"cannot write the feedback database {self.path}: {exc}") from exc
        return vote_id

    def confirm(self, votes: list[Vote], bounds: FeedbackBounds, now: float | None = None) -> list[str]:
        """A curator's verdict on one question: ``votes`` (one key, one question) replace every earlier vote of that
        key on that question, in one write transaction; returns the new rows' ids."""
        if not votes or len({(v.key_name, v.norm) for v in votes}) != 1:
            raise ValueError("a confirmation is one key's votes on one question")
        self._create()
        now = time.time() if now is None else now
        try:
            with self._conn() as c:
                c.execute("BEGIN IMMEDIATE")
                c.execute("DELETE FROM votes WHERE key_name = ? AND norm = ?", (votes[0].key_name, votes[0].norm))
                ids = [str(c.execute(_UPSERT, _row(v, now)).fetchone()[0]) for v in votes]
                self._trim(c, votes[0].key_name, bounds.max_per_key)
        except sqlite3.Error as exc:
            raise FeedbackStoreUnavailable(f"cannot write the feedback database {self.path}: {exc}") from exc
        return ids

    def remember(self, completion: Completion, bounds: FeedbackBounds, now: float | None = None) -> None:
        """Keep a chat completion for feedback by its id; completions past ``bounds`` (by age, per key) are deleted."""
        self._create()
        now = time.time() if now is None else now
        products = json.dumps(sorted(completion.key_products)) if completion.key_products is not None else None
        row = (
            completion.id,
            now,
            completion.key_name,
            products,
            completion.index_version,
            completion.question,
            str(completion.answer_mode),
            json.dumps(list(completion.doc_ids)),
            completion.answer_doc_id,
        )
        try:
            with self._conn() as c:
                c.execute("BEGIN IMMEDIATE")
                cutoff = bounds.cutoff(now)
                if cutoff is not None:
                    c.execute("DELETE FROM completions WHERE created < ?", (cutoff,))
                c.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                held = c.execute("SELECT COUNT(*) FROM completions WHERE key_name = ?", (completion.key_name,)).fetchone()[0]
                if held > bounds.max_per_key:
                    c.execute(
                        "DELETE FROM completions WHERE id IN (SELECT id FROM completions WHERE key_name = ? ORDER BY created, rowid LIMIT ?)",
                        (completion.key_name, held - bounds.max_per_key),
                    )
        except sqlite3.Error as exc:
            raise FeedbackStoreUnavailable(f"cannot write the feedback database {self.path}: {exc}") from exc

    def completion(self, completion_id: str, bounds: FeedbackBounds | None = None, now: float | None = None) -> Completion | None:
        """The kept completion of this id (None: unknown, or expired under ``bounds``)."""
        if not self.path.exists():
            return None
        cutoff = bounds.cutoff(time.time() if now is None else now) if bounds else None
        try:
            with self._conn() as c:
                r = c.execute("SELECT * FROM completions WHERE id = ? AND created >= ?", (completion_id, cutoff or 0.0)).fetchone()
        except sqlite3.OperationalError:  # a file written before completions were kept, not yet written since
            return None
        if r is None:
            return None
        products = json.loads(r["key_products"]) if r["key_products"] is not None else None
        return Completion(
            id=r["id"],
            key_name=r["key_name"],
            key_products=tuple(products) if products is not None else None,
            index_version=r["index_version"],
            question=r["question"],
            answer_mode=AnswerMode(r["answer_mode"]),
            doc_ids=tuple(json.loads(r["doc_ids"])),
            answer_doc_id=r["answer_doc_id"],
        )

    @staticmethod
    def _trim(c: sqlite3.Connection, key_name: str, max_rows: int) -> int:
        """Delete the key's oldest rows beyond ``max_rows``; how many were deleted."""
        held = c.execute("SELECT COUNT(*) FROM votes WHERE key_name = ?", (key_name,)).fetchone()[0]
        if held <= max_rows:
            return 0
        doomed = c.execute("SELECT id FROM votes WHERE key_name = ? ORDER BY updated, rowid LIMIT ?", (key_name, held - max_rows)).fetchall()
        c.executemany("DELETE FROM votes WHERE id = ?", [(r["id"],) for r in doomed])
        return len(doomed)

    def votes(self, bounds: FeedbackBounds | None = None, now: float | None = None) -> list[StoredVote]:
        """Every stored row, oldest first (with ``bounds``: those not yet expired)."""
        if not self.path.exists():
            return []
        cutoff = bounds.cutoff(time.time() if now is None else now) if bounds else None
        with self._conn() as c:
            rows = c.execute("SELECT * FROM votes WHERE updated >= ? ORDER BY updated, rowid", (cutoff or 0.0,)).fetchall()
        return [_stored(r) for r in rows]


def _row(vote: Vote, now: float) -> tuple[object, ...]:
    """The values of :data:`_UPSERT` for ``vote`` sent at ``now`` (a new id, used when the row is new)."""
    products = json.dumps(sorted(vote.key_products)) if vote.key_products is not None else None
    rating = str(vote.rating) if vote.rating is not None else None
    return (
        f"fb-{secrets.token_hex(8)}",
        now,
        now,
        vote.key_name,
        products,
        int(vote.trusted),
        vote.index_version,
        vote.query,
        vote.norm,
        rating,
        vote.doc_id or "",
        vote.domain,
        int(vote.not_covered),
        vote.comment,
    )


def _stored(r: sqlite3.Row) -> StoredVote:
    products = json.loads(r["key_products"]) if r["key_products"] is not None else None
    vote = Vote(
        query=r["query"],
        key_name=r["key_name"],
        key_products=tuple(products) if products is not None else None,
        trusted=bool(r["trusted"]),
        index_version=r["index_version"],
        rating=Rating(r["rating"]) if r["rating"] else None,
        doc_id=r["doc_id"] or None,
        domain=r["domain"],
        not_covered=bool(r["not_covered"]),
        comment=r["comment"],
    )
    return StoredVote(r["id"], vote, r["created"], r["updated"], r["times"])
