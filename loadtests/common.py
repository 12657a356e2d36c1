"""Helpers shared by the load-test scripts: loopback-only targets, starting ``fedqa serve`` as a subprocess."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import httpx

REPO = Path(__file__).resolve().parents[1]
DEFAULT_QUERIES = REPO / "service" / "demo" / "data" / "queries.jsonl"


def load_queries(path: str | os.PathLike | None = None) -> list[dict]:
    """Records with a non-empty ``query`` from a JSONL file (default: FEDQA_LOADTEST_QUERIES, else the demo's)."""
    path = Path(path or os.environ.get("FEDQA_LOADTEST_QUERIES") or DEFAULT_QUERIES)
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                if isinstance(rec.get("query"), str) and rec["query"].strip():
                    out.append(rec)
    if not out:
        raise ValueError(f"no queries in {path}")
    return out


def is_loopback(url: str) -> bool:
    """True when the URL's host is on this machine (127.0.0.0/8, ::1, localhost)."""
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_loopback(url: str, allow_remote: bool) -> None:
    """Refuse to load-test anything but this machine unless explicitly allowed."""
    if not allow_remote and not is_loopback(url):
        raise SystemExit(f"refusing to load-test {url}: only loopback targets without --allow-remote")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_ready(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until GET /readyz answers 200 (or fail when the process exits or time runs out)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the service exited with code {proc.returncode} before it was ready")
        try:
            r = httpx.get(url.rstrip("/") + "/readyz", timeout=5)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s: {last}")


@contextmanager
def serve(
    home: str | Path,
    port: int,
    *,
    env: dict[str, str] | None = None,
    ready_timeout_s: float = 300,
    log_path: str | Path | None = None,
    args: Sequence[str] = (),
) -> Iterator[subprocess.Popen]:
    """Run ``fedqa serve`` on 127.0.0.1:port with FEDQA_HOME=home (and ``args``, e.g. ``--demo``) until the block ends."""
    full_env = {**os.environ, "FEDQA_HOME": str(home), "HF_HUB_OFFLINE": "1", **(env or {})}
    out: IO[str] | int = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        cwd=REPO,
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", ready_timeout_s, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not isinstance(out, int):
            out.close()
