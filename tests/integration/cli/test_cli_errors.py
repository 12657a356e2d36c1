"""Expected failures of the ``fedqa`` command, through a real process: one line that says what to do, a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.demo import DOCS
from tests.utils import ROOT, free_port


def fedqa(*args: str, home: Path, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m service.cli ARGS`` as a new process on ``home``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    # PyTorch encoder and a cache beside the home: no ONNX export in these tests (nor in the user's cache)
    full.update(FEDQA_HOME=str(home), FEDQA_CACHE=str(home.parent / "cache"), FEDQA_ENCODER_BACKEND="torch", FEDQA_LLM_BACKEND="none")
    full.update(HF_HUB_OFFLINE="1", **env)
    for quiet in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):  # set in this process by an in-process JSON-logging server
        full.pop(quiet, None)  # the commands show their bars
    return subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


@contextmanager
def serving(home: Path, port: int) -> Iterator[None]:
    """``fedqa serve`` on ``home`` as a real process until the block ends (ready: /healthz answers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(FEDQA_HOME=str(home), FEDQA_LLM_BACKEND="none", HF_HUB_OFFLINE="1", FEDQA_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(1)
        assert proc.poll() is None, "fedqa serve exited"
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def assert_one_line_failure(out: subprocess.CompletedProcess, *words: str) -> str:
    """Non-zero exit, no traceback, and the last line of stderr is ``fedqa: error: ...`` naming ``words``."""
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("fedqa: error: "), out.stderr[-2000:]
    for w in words:
        assert w in last, last
    return last


def test_unreachable_service_missing_home_and_bad_files_end_in_one_line(tmp_path):
    home = tmp_path / "home"
    out = fedqa("ask", "sso", "--url", f"http://127.0.0.1:{free_port()}", home=home)
    assert_one_line_failure(out, "cannot reach the service", "fedqa serve")
    assert len(out.stderr.strip().splitlines()) == 1  # nothing but the line
    assert out.stdout == ""

    assert_one_line_failure(fedqa("ask", "sso", home=home), "no index", "fedqa ingest")

    bad = tmp_path / "queries.jsonl"
    bad.write_text('{"qid": "a", "query": "x", "domains": ["d"]}\n{not json\n', encoding="utf-8")
    assert_one_line_failure(fedqa("train", "router", "--queries", str(bad), home=home), f"{bad}:2", "not JSON")
    assert_one_line_failure(fedqa("ingest", str(tmp_path / "missing"), home=home), "no such file")


@pytest.mark.slow
def test_index_open_in_a_running_service_and_refusing_service_end_in_one_line(tmp_path):
    """While ``fedqa serve`` holds the embedded index, an in-process ask says so in one line; a service that
    answers an error (422 for an empty question) is reported in one line too."""
    home = tmp_path / "home"
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(DOCS.read_text(encoding="utf-8").splitlines()[::30]) + "\n", encoding="utf-8")
    assert fedqa("ingest", str(docs), "--quiet", home=home).returncode == 0
    port = free_port()
    with serving(home, port):
        out = fedqa("ask", "How do I import contacts?", "--no-generate", home=home)
        assert_one_line_failure(out, "open in another process")
        out = fedqa("ask", "", "--url", f"http://127.0.0.1:{port}", home=home)
        assert_one_line_failure(out, "answered 422", "query")
        ok = fedqa("ask", "How do I import contacts?", "--no-generate", "--url", f"http://127.0.0.1:{port}", home=home)
        assert ok.returncode == 0 and json.loads(ok.stdout)["sources"]


def test_resuming_a_cancelled_job_says_to_submit_it_again(tmp_path):
    """A cancelled job drops its questions (issue 50, fault 3): ``--resume`` of one is a one-line error, not a summary of nothing."""
    from service.evaluation.jobs import JobStore
    from service.evaluation.spec import JobQuestion, JobSpec
    from service.retrieval.strategies import StrategyName

    home = tmp_path / "home"
    store = JobStore.for_home(home)
    job = store.create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q1", query="How do refunds work?")])
    store.cancel(job)
    r = fedqa("evaluate", "--resume", job, home=home, timeout=300)
    assert r.returncode != 0 and f"evaluation job {job} was cancelled" in r.stderr and "submit it again" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
