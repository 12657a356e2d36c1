"""Locust users for fedqa.

- ``RetrievalUser``: ``POST /ask`` with ``generate: false`` (routing + federated search only).
- ``AskUser``: full ``POST /ask`` (retrieval, then the LLM or the extractive answer).
- ``EvaluateUser``: ``POST /evaluate`` submissions; anything but 202 (a 404 included) is a failure.

Environment:
- ``FEDQA_LOADTEST_QUERIES``: JSONL file with a ``query`` per line (``domains`` and
  ``gold_doc_ids`` are used by EvaluateUser when present); default: the demo's questions.
- ``FEDQA_API_KEY``: sent as ``Authorization: Bearer <key>`` when set.
- ``FEDQA_LOADTEST_WAIT``: think time between a user's requests, ``"min,max"`` seconds (default ``0.5,1.5``).

Run it through ``loadtests/run_locust.py`` (headless, prints req/s and percentiles), or plainly:
``locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 RetrievalUser``.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from pathlib import Path

from locust import HttpUser, between, task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_queries  # noqa: E402

REQUEST_TIMEOUT_S = 300
log = logging.getLogger("fedqa.loadtest")


def _wait() -> tuple[float, float]:
    raw = os.environ.get("FEDQA_LOADTEST_WAIT", "0.5,1.5")
    lo, _, hi = raw.partition(",")
    return float(lo), float(hi or lo)


QUERIES = load_queries()
EVAL_QUERIES = [q for q in QUERIES if q.get("domains") and q.get("gold_doc_ids")] or QUERIES


def auth_headers() -> dict[str, str]:
    """The API key header, when FEDQA_API_KEY is set."""
    key = os.environ.get("FEDQA_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class _FedqaUser(HttpUser):
    abstract = True
    wait_time = between(*_wait())

    def on_start(self) -> None:
        self.client.headers.update(auth_headers())

    def _ask(self, body: dict, name: str) -> None:
        with self.client.post("/ask", json=body, name=name, timeout=REQUEST_TIMEOUT_S, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            try:
                data = r.json()
            except ValueError:
                r.failure("response is not JSON")
                return
            if not data.get("sources"):
                r.failure("no sources in the answer")


class RetrievalUser(_FedqaUser):
    """Retrieval-only /ask (generate=false)."""

    @task
    def ask_retrieval(self) -> None:
        self._ask({"query": random.choice(QUERIES)["query"], "generate": False}, "/ask [retrieval]")


class AskUser(_FedqaUser):
    """Full /ask: retrieval and an answer."""

    @task
    def ask_full(self) -> None:
        self._ask({"query": random.choice(QUERIES)["query"]}, "/ask [full]")


class EvaluateUser(_FedqaUser):
    """/evaluate submissions of a few labelled questions; only 202 (job accepted) is a success."""

    @task
    def evaluate(self) -> None:
        picked = random.sample(EVAL_QUERIES, k=min(3, len(EVAL_QUERIES)))
        body = {
            "queries": [
                {"query": q["query"], "domains": list(q.get("domains") or []), "gold_doc_ids": list(q.get("gold_doc_ids") or [])} for q in picked
            ],
            "strategies": ["mkpqa"],
            "metrics": ["retrieval"],
        }
        with self.client.post("/evaluate", json=body, name="/evaluate", timeout=REQUEST_TIMEOUT_S, catch_response=True) as r:
            if r.status_code != 202:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
