"""Smoke runs of the load-test scripts on loopback: a few seconds of Locust, a few seconds of soak.

The real figures (20 users x 2 minutes on faq6, a soak of several minutes) are run by hand;
these only prove that the scripts work end to end and stay bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from service.files import copytree_sparse
from tests.utils import ROOT, free_port, make_settings, served_app, serving_in_thread


@pytest.fixture(scope="module")
def live_url(demo_pipeline, tmp_path_factory):
    """The app on the shared demo pipeline, served by uvicorn on 127.0.0.1 in a thread; the EvaluateUser's jobs go to
    a home of its own, and the job worker they start stops with the module (it outlived the session, polling the
    demo home's jobs database after it was removed)."""
    # no rate limit, and room for every job the EvaluateUser submits (the per-client quota: tests/integration/api/test_evaluate_api.py)
    home = tmp_path_factory.mktemp("loadtests-home")
    settings = make_settings(home, rate_limit_per_minute=0, jobs_max_unfinished_per_key=10_000)
    state = ServiceState(settings)
    state.pipeline = demo_pipeline
    app = create_app(settings, state)
    with served_app(app) as url:
        yield url
        worker = getattr(app.state, "eval_worker", None)
        if worker is not None:
            worker.stop()


def _run_locust(host: str, csv_dir: Path, name: str, *, users: int, duration: int, wait: str, user_classes: list[str]) -> subprocess.CompletedProcess:
    """``loadtests/run_locust.py`` headless against ``host`` (spawn rate = users), as a user runs it."""
    args = ["--host", host, "--users", str(users), "--spawn-rate", str(users), "--duration", str(duration), "--wait", wait]
    args += ["--csv-dir", str(csv_dir), "--name", name, *user_classes]
    return subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "run_locust.py"), *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def test_locust_headless_script_reports_per_endpoint(live_url, tmp_path):
    out = _run_locust(live_url, tmp_path, "smoke", users=3, duration=6, wait="0.1,0.3", user_classes=["RetrievalUser", "EvaluateUser"])
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    rows = {r["endpoint"]: r for r in summary["endpoints"]}
    ask = rows["POST /ask [retrieval]"]
    assert ask["requests"] > 3 and ask["failures"] == 0 and ask["p50_ms"] > 0 and ask["p99_ms"] >= ask["p50_ms"]
    assert rows["POST /evaluate"]["requests"] > 0  # accepted jobs (202) only count as successes
    assert all(r["failures"] == 0 for r in rows.values())
    assert (tmp_path / "smoke_stats.csv").is_file() and (tmp_path / "smoke_stats_history.csv").is_file()
    assert "req/s" in out.stdout and "p99" in out.stdout


def test_locust_counts_404_on_evaluate_as_a_failure(tmp_path):
    """A service without /evaluate (404) must show up as failures, never as successes."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotFound(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = b'{"detail": "Not Found"}'
            self.send_response(404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving_in_thread(ThreadingHTTPServer(("127.0.0.1", 0), NotFound)) as server:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        out = _run_locust(host, tmp_path, "notfound", users=2, duration=3, wait="0.1,0.2", user_classes=["EvaluateUser"])
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    rows = {r["endpoint"]: r for r in summary["endpoints"]}
    assert not any("skipped" in name for name in rows), rows
    evaluate = rows["POST /evaluate"]
    assert evaluate["requests"] > 1 and evaluate["failures"] == evaluate["requests"]


def test_locust_script_refuses_remote_targets(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtests" / "run_locust.py"),
            "--host",
            "http://203.0.113.7:8000",
            "--duration",
            "1",
            "--csv-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode != 0 and "only loopback" in out.stderr


def test_soak_script_reports_memory(demo_home, tmp_path):
    home = tmp_path / "home"
    copytree_sparse(demo_home, home)  # the service subprocess locks its own copy
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtests" / "soak.py"),
            "--home",
            str(home),
            "--port",
            str(free_port()),
            "--duration",
            "5",
            "--warmup-s",
            "2",
            "--sample-every",
            "1",
            "--concurrency",
            "2",
            "--max-growth-mb",
            "500",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
        env={**os.environ, "FEDQA_CACHE": str(home / "cache")},  # the copy's encoder export (tests/conftest.py demo_home)
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["requests"] > 0 and "5xx" not in report["responses"]
    assert report["rss_start_mb"] > 50 and report["rss_max_mb"] >= report["rss_end_mb"]
    assert len(report["samples_mb"]) >= 5 and report["rss_idle_mb"] > 50
