"""One SQLite transaction on a file store (the evaluation jobs, the feedback): a connection per call, rows by name."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def transaction(path: Path, *, timeout: float = 30.0) -> Iterator[sqlite3.Connection]:
    """A connection to ``path`` whose block commits on success and rolls back on error; closed after."""
    conn = sqlite3.connect(str(path), timeout=timeout)
    conn.row_factory = sqlite3.Row
    try:
        with conn:
            yield conn
    finally:
        conn.close()
