"""``fedqa serve`` refuses an open API on a network address and placeholder secrets (issue 50, fault 9), through real
processes: it exits at once with one line naming the fix; a loopback start without keys still works and says so."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from service.api.exposure import PLACEHOLDERS
from tests.integration.cli.test_cli_errors import assert_one_line_failure, fedqa
from tests.utils import ROOT, free_port


def _serve(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``fedqa serve ARGS`` expected to exit on its own (a server that starts instead runs into the timeout)."""
    return fedqa("serve", "--port", str(free_port()), *args, home=home, timeout=120, **env)


def _starts(home: Path, *args: str, **env: str) -> str:
    """Start ``fedqa serve ARGS``, wait until it listens, stop it; its log so far."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    full.update(FEDQA_HOME=str(home), FEDQA_LLM_BACKEND="none", FEDQA_LOG_FORMAT="text", HF_HUB_OFFLINE="1", **env)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), *args], cwd=ROOT, env=full, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "Uvicorn running on" in line or "Application startup complete" in line:
                return "".join(lines)
        raise AssertionError("fedqa serve did not start: " + "".join(lines)[-2000:])
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_network_address_without_keys_is_refused(tmp_path):
    """It served /ask, /evaluate and /metrics to anyone who reached 0.0.0.0, logging nothing about it."""
    out = _serve(tmp_path / "home", "--host", "0.0.0.0")
    assert_one_line_failure(out, "refusing to serve on 0.0.0.0 without an API key", "FEDQA_API_KEYS", "FEDQA_ALLOW_OPEN")


def test_placeholder_secrets_are_refused(tmp_path):
    """The k8s base rendered replace-me keys and the server accepted 'replace-me-admin' as the admin key."""
    home = tmp_path / "home"
    out = _serve(home, FEDQA_API_KEYS="real-key-1,replace-me", FEDQA_ADMIN_KEY="replace-me-admin")
    last = assert_one_line_failure(out, "FEDQA_API_KEYS", "FEDQA_ADMIN_KEY", "placeholder")
    assert "real-key-1" not in last
    keys_file = tmp_path / "keys.json"
    digest = hashlib.sha256(b"replace-me").hexdigest()
    keys_file.write_text(json.dumps([{"name": "ops", "key_sha256": digest, "domains": "*", "admin": True}]), encoding="utf-8")
    assert_one_line_failure(_serve(home, FEDQA_API_KEYS_FILE=str(keys_file)), "keys file entry 'ops'", "placeholder")
    assert_one_line_failure(_serve(home, FEDQA_API_KEYS="k", FEDQA_QDRANT_API_KEY="replace-me-qdrant"), "FEDQA_QDRANT_API_KEY")


def test_the_k8s_base_secrets_are_all_refused_placeholders():
    """The base kustomization renders only placeholder secrets, each of which the server refuses: a base applied
    as it is never serves with a key everyone knows."""
    kustomization = yaml.safe_load((ROOT / "k8s" / "base" / "kustomization.yaml").read_text())
    values = [lit.split("=", 1)[1] for gen in kustomization["secretGenerator"] for lit in gen["literals"]]
    assert values and set(values) <= PLACEHOLDERS, set(values) - PLACEHOLDERS


def test_loopback_without_keys_and_an_open_network_address_on_purpose_start_and_say_so(tmp_path):
    """The README's first command (no keys, 127.0.0.1) still starts, and says the API is open on loopback only;
    FEDQA_ALLOW_OPEN=1 serves openly on 0.0.0.0 with a warning."""
    home = tmp_path / "home"
    log = _starts(home)
    assert "listening on 127.0.0.1 (loopback only); no API key" in log, log[-2000:]
    log = _starts(home, "--host", "0.0.0.0", FEDQA_ALLOW_OPEN="1")
    assert "WARNING" in log and "listening on 0.0.0.0 (reachable from the network); no API key" in log, log[-2000:]
    log = _starts(home, "--host", "0.0.0.0", FEDQA_API_KEYS="a-real-key")
    assert "listening on 0.0.0.0 (reachable from the network); the API needs a key" in log, log[-2000:]
