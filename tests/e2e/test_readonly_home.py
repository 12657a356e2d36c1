"""A read-only data home (as k8s mounts it): the service starts and answers without the job worker, and
runs jobs when FEDQA_JOBS_DB names a writable place. The k8s manifests give the jobs such a place.

Read-only is real: as root (for whom permission bits are no barrier) the home is bind-mounted read-only in a
private mount namespace of the service's process (``unshare -m``), as a read-only volume is; otherwise its
files lose their write bits.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.utils import ROOT

K8S = ROOT / "k8s"

# Runs in the unprivileged subprocess: ingest a small demo index through qdrant-client (the k8s store is a
# Qdrant server; the home then only holds versions and manifests), make the home read-only, serve it.
SCRIPT = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from fastapi.testclient import TestClient
from indexes.ingest import ingest
from service.api.app import create_app
from service.api.state import ServiceState
from service.config import Settings
from service.retrieval.client_store import ClientBackend
from tests.utils import ROOT

home, docs, jobs_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
backend = ClientBackend.from_url(":memory:")
settings = Settings(home=home, llm_backend="none", rate_limit_per_minute=0)
ingest([docs], settings, backend=backend, progress=False)
if os.geteuid() == 0:  # inside `unshare -m`: this mount is private to this process
    subprocess.run(["mount", "--bind", str(home), str(home)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(home)], check=True)
else:
    for path in [home, *home.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
try:
    (home / "probe").write_text("x")
    out = {"home_writable": True}
except OSError:
    out = {"home_writable": False}
with TestClient(create_app(settings, ServiceState(settings, backend=backend))) as c:
    out["readyz"] = c.get("/readyz").status_code
    out["ask"] = c.post("/ask", json={"query": "How do I refund a payment?", "generate": False}).status_code
    r = c.post("/evaluate", json={"dataset": "demo", "limit": 3})
    out["evaluate"], out["evaluate_detail"] = r.status_code, r.json().get("detail")
    out["dry_run"] = c.post("/evaluate", json={"dataset": "demo", "limit": 3, "dry_run": True}).status_code
    out["list"] = c.get("/evaluate").status_code
out["eval_dir_created"] = (home / "eval").exists()
settings = Settings(home=home, llm_backend="none", rate_limit_per_minute=0, jobs_db=jobs_dir / "jobs.sqlite")
with TestClient(create_app(settings, ServiceState(settings, backend=backend))) as c:
    r = c.post("/evaluate", json={"dataset": "demo", "limit": 3, "strategies": ["uis"]})
    out["jobs_db_evaluate"] = r.status_code
    t0 = time.monotonic()
    while c.get(f"/evaluate/{r.json()['id']}").json()["status"] != "done" and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    out["jobs_db_status"] = c.get(f"/evaluate/{r.json()['id']}").json()["status"]
print(json.dumps(out))
"""


def _command(*args: str) -> list[str]:
    """The script's command line: in a private mount namespace when root (see the module doc)."""
    cmd = [sys.executable, "-c", SCRIPT, *args]
    if os.geteuid() != 0:
        return cmd
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-m", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("running as root without a usable 'unshare -m': cannot make a read-only home")
    return [unshare, "-m", *cmd]


def test_service_starts_on_a_read_only_home_without_the_job_worker():
    from service.demo import DOCS

    work = Path(tempfile.mkdtemp(prefix="fedqa-ro-"))
    try:
        home, jobs, cache = work / "home", work / "jobs", work / "cache"
        for d in (home, jobs, cache):
            d.mkdir()
        docs = work / "docs.jsonl"
        lines = DOCS.read_text(encoding="utf-8").splitlines()
        docs.write_text("\n".join(lines[::9]) + "\n", encoding="utf-8")  # ~40 passages of every product
        # PyTorch: no ONNX export of the base encoder in this test (30-40 s on 2 cores; the export's own tests are
        # tests/integration/retrieval/test_encoder_onnx.py, and it lies in the user's cache, not the read-only home)
        env = {**os.environ, "HOME": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "FEDQA_ENCODER_BACKEND": "torch"}
        env.pop("FEDQA_JOBS_DB", None)
        out = subprocess.run(
            _command(str(home), str(docs), str(jobs)), env=env, cwd=str(work), capture_output=True, text=True, timeout=600, check=False
        )
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for path in [work, *work.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(stat.S_IRWXU | (path.stat().st_mode & 0o777))
        shutil.rmtree(work, ignore_errors=True)
    assert got["home_writable"] is False
    assert got["readyz"] == 200 and got["ask"] == 200  # serving as usual
    assert got["evaluate"] == 503 and "FEDQA_JOBS_DB" in got["evaluate_detail"]  # says why, and what to set
    assert got["dry_run"] == 200 and got["list"] == 503
    assert got["eval_dir_created"] is False
    assert got["jobs_db_evaluate"] == 202 and got["jobs_db_status"] == "done"  # jobs elsewhere: the worker runs


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("overlay", [None, "local"])
def test_k8s_gives_jobs_a_writable_per_pod_place(overlay):
    """The home is mounted read-only; FEDQA_JOBS_DB points into a per-pod emptyDir (SQLite needs a local disk)."""
    dep = _docs(K8S / "base" / "fedqa-deployment.yaml")[0]
    config = _docs(K8S / "base" / "fedqa-configmap.yaml")[0]["data"]
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {**config, **{e["name"]: e.get("value") for e in container.get("env", [])}}
    if overlay:
        patch = _docs(K8S / "overlays" / overlay / "patch-fedqa.yaml")[0]
        for c in patch["spec"]["template"]["spec"]["containers"]:
            env.update({e["name"]: e.get("value") for e in c.get("env", [])})
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts[env["FEDQA_HOME"]]["readOnly"] is True
    jobs_db = Path(env["FEDQA_JOBS_DB"])
    mount = next(m for p, m in mounts.items() if jobs_db.is_relative_to(p))
    assert not mount.get("readOnly") and not jobs_db.is_relative_to(env["FEDQA_HOME"])
    assert "emptyDir" in volumes[mount["name"]]  # per pod: never one SQLite file shared over ReadWriteMany
