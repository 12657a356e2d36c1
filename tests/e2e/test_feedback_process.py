"""Feedback survives ``kill -9`` of ``fedqa serve`` (a real process): a 202 means the vote is committed to disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx

from service.feedback.store import FeedbackStore
from service.files import copytree_sparse
from tests.utils import free_port, wait_ready


def test_feedback_answered_202_survives_kill_9(demo_home, tmp_path):
    home = tmp_path / "home"
    copytree_sparse(demo_home, home)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(FEDQA_HOME=str(home), FEDQA_CACHE=str(home / "cache"), FEDQA_PORT=str(port), FEDQA_LLM_BACKEND="none", HF_HUB_OFFLINE="1")
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = wait_ready(url, proc, 180, 0.2)
        assert proc.poll() is None and ready is not None and ready.status_code == 200, "fedqa serve did not become ready"
        source = httpx.post(f"{url}/ask", json={"query": "How do I import contacts?", "generate": False}, timeout=60).json()["sources"][0]
        r = httpx.post(f"{url}/feedback", json={"query": "How do I import contacts?", "rating": "up", "doc_id": source["doc_id"]}, timeout=30)
        assert r.status_code == 202, r.text
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stored = FeedbackStore(home / "feedback" / "feedback.sqlite").votes()
    assert [(v.id, v.vote.doc_id, v.vote.domain, v.vote.rating) for v in stored] == [(r.json()["id"], source["doc_id"], source["domain"], "up")]
