"""``fedqa refresh`` and ``fedqa train router`` as real processes on a demo home: killed with SIGKILL before the
activation they leave the previous bundle answering with its "not covered" decision; run beside a ``fedqa serve``
holding the same home's embedded index they complete every fit, and after ``POST /admin/reload`` ``/readyz`` shows
each decision."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.artifacts import Registry
from service.demo import OUT_OF_SCOPE, QUERIES
from service.files import copytree_sparse
from tests.utils import ROOT, free_port, wait_ready, wait_until

ADMIN = {"Authorization": "Bearer admin-secret"}
SOURDOUGH = "How do I bake sourdough bread?"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(FEDQA_HOME=str(home), FEDQA_CACHE=str(home / "cache"), FEDQA_LLM_BACKEND="none", HF_HUB_OFFLINE="1")
    env.update(FEDQA_ADMIN_KEY="admin-secret", **extra)
    return env


def _fedqa(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", *args]


def _questions(tmp_path: Path) -> tuple[Path, Path]:
    """A third of the demo's labelled questions (each product's, by line) and its out-of-scope ones: a refresh of
    about a minute."""
    lines = [line for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(lines[::3]) + "\n", encoding="utf-8")
    return queries, OUT_OF_SCOPE


@pytest.fixture()
def home(demo_home: Path, tmp_path: Path) -> Path:
    """A copy of the session's demo home (its router, split and "not covered" fitted)."""
    copy = tmp_path / "home"
    copytree_sparse(demo_home, copy)
    return copy


def _ask(home: Path, question: str) -> dict:
    out = subprocess.run(_fedqa("ask", question), env=_env(home), cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_refresh_killed_after_the_router_is_saved_leaves_the_previous_bundle_serving(home, tmp_path):
    registry = Registry(home)
    before = registry.active()
    queries, oos = _questions(tmp_path)
    proc = subprocess.Popen(
        _fedqa("refresh", "--queries", str(queries), "--out-of-scope", str(oos), "--quiet"),
        env=_env(home),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the progress lines: kill once the new router is saved, its decisions not yet fitted
            seen.append(line)
            if "router: fitted" in line:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL, "".join(seen[-20:])
    saved = [v.version for v in registry.list("router") if v.version != before["router"]]
    assert saved, "the refresh was killed before it saved its router"
    assert registry.active() == before  # nothing was activated
    bread = _ask(home, SOURDOUGH)
    assert bread["answer_mode"] == "not_covered", bread["confidence"]
    assert bread["versions"]["router"] == before["router"]


@pytest.mark.slow
def test_train_router_killed_after_its_router_is_saved_leaves_the_previous_bundle_serving(home, tmp_path):
    """``fedqa train router`` used to activate its router before fitting "not covered": killed then, the service
    answered every question. Now the new router is activated only with its decisions."""
    registry = Registry(home)
    before = registry.active()
    queries, _ = _questions(tmp_path)
    proc = subprocess.Popen(
        _fedqa("train", "router", "--queries", str(queries), "--quiet"),
        env=_env(home),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: [v for v in registry.list("router") if v.version != before["router"]] or proc.poll() is not None, timeout=600)
        assert proc.poll() is None, f"train router ended (rc {proc.returncode}) before it was killed"
        time.sleep(2)  # into the fits that follow the save (split and "not covered" take tens of seconds here)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert registry.active() == before
    bread = _ask(home, SOURDOUGH)
    assert bread["answer_mode"] == "not_covered" and bread["versions"]["router"] == before["router"], bread["confidence"]


@contextmanager
def _serving(home: Path) -> Iterator[str]:
    """``fedqa serve`` on ``home`` (a real process holding the embedded index), ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (home.parent / "serve.log").open("w")
    proc = subprocess.Popen(_fedqa("serve"), env=_env(home, FEDQA_PORT=str(port)), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = wait_ready(url, proc, 300)
        assert proc.poll() is None and ready is not None and ready.status_code == 200, "fedqa serve did not become ready"
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _reloaded(url: str) -> dict:
    """``/readyz`` after ``POST /admin/reload``."""
    r = httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=300)
    assert r.status_code == 200, r.text
    ready = httpx.get(f"{url}/readyz", headers=ADMIN, timeout=30)
    assert ready.status_code == 200, ready.text
    return ready.json()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_train_router_and_refresh_beside_a_running_serve_fit_every_decision(home, tmp_path):
    queries, oos = _questions(tmp_path)
    registry = Registry(home)
    with _serving(home) as url:
        # train router: its split and "not covered" are fitted against the new version before it is activated
        trained = subprocess.run(
            _fedqa("train", "router", "--queries", str(queries), "--quiet"), env=_env(home), cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert trained.returncode == 0, trained.stderr[-3000:]
        fit = json.loads(trained.stdout)
        assert "skipped" not in (fit["abstention"] or {"skipped": "none"}), fit["abstention"]
        assert "skipped" not in (fit["fusion"] or {}), fit["fusion"]
        ready = _reloaded(url)
        assert ready["versions"]["router"] == fit["router"] == registry.active()["router"]
        assert ready["decisions"]["not_covered"] is not None and ready["decisions"]["by_product"] is not None, ready["decisions"]

        refreshed = subprocess.run(
            _fedqa("refresh", "--queries", str(queries), "--out-of-scope", str(oos), "--quiet"),
            env=_env(home),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert refreshed.returncode == 0, refreshed.stderr[-3000:]
        table = refreshed.stdout
        for stage in ("router", "ranking", "answer policy", "split", "not covered"):  # every fit ran (a decision may keep its default)
            assert any(line.startswith(stage) and (" fitted " in line or " default kept " in line) for line in table.splitlines()), table
        router = registry.active()["router"]
        assert router != fit["router"]
        ready = _reloaded(url)
        assert ready["versions"]["router"] == router
        decisions = ready["decisions"]
        ranking = next(line for line in table.splitlines() if line.startswith("ranking"))  # names what its guard did
        serves = " fitted " in ranking
        assert ("model serves: it beat the default" in ranking) == serves and "out of fold Acc@1" in ranking, ranking
        assert decisions["ranking"] is not None and decisions["ranking"]["serves"] == serves, decisions
        assert decisions["not_covered"] is not None and decisions["not_covered"]["model"].startswith(router), decisions
        assert decisions["by_product"] is not None and decisions["by_product"]["rule"].startswith(router), decisions
        assert not any("answer policy" in w for w in ready["warnings"]), ready["warnings"]
        bread = httpx.post(f"{url}/ask", json={"query": SOURDOUGH}, timeout=120).json()
        assert bread["answer_mode"] == "not_covered", bread.get("confidence")
