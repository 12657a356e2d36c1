"""The body of ``GET /evaluate/{id}/questions``, streamed a page of records at a time: a job of the most questions
holds some 50,000 records (300-400 MB of JSON), which built whole took about 6 times that in memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from service.evaluation.jobs import JobStore


def questions_body(store: JobStore, job_id: str, page: int) -> Iterator[str]:
    """The JSON of ``{"id": job_id, "records": [...]}`` in pieces, one a page of ``page`` records read by a query of
    its own (written as FastAPI writes JSON: compact, not ASCII-escaped)."""
    yield f'{{"id":{_json(job_id)},"records":['
    after, first = (-1, "", ""), True
    while True:
        records = store.results(job_id, after, page)
        if records:
            yield ("" if first else ",") + ",".join(_json(r.stored()) for r in records)
            first = False
        if len(records) < page:
            break
        after = (records[-1].position, str(records[-1].strategy), records[-1].qid)  # as JobStore.save_result keys it
    yield "]}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
