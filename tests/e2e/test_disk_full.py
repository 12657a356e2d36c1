"""A full file system under the home (issue 50, fault 14), on a real small tmpfs: the embedded store writes into
memory-mapped holes, and once the file system was full ``fedqa ingest`` died with SIGBUS (exit -7, no message) and
``fedqa serve`` grew the shard files and died the same way. Now a write that would leave less than
FEDQA_MIN_FREE_MB free is refused with one line naming the folder, the active version stays as it was, and serve
stays up, not ready, saying why.

The tmpfs is mounted in a mount namespace of its own (``unshare``; a user namespace too, so this runs unprivileged
where user namespaces are allowed): the machine's mounts are untouched. Skipped where no such namespace can be made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FEWLABEL_DOCS
from tests.utils import ROOT, free_port, present

UNSHARE = shutil.which("unshare")

# Run inside the namespace: mount a small tmpfs, ingest, fill it, ingest again and serve, record what happened.
DRIVER = r"""
import json, os, subprocess, sys, time
import httpx

fs, docs, changed, out, port, cache = sys.argv[1:7]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", fs], check=True)
env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
env.update(FEDQA_HOME=fs + "/home", FEDQA_CACHE=cache, FEDQA_LLM_BACKEND="none",
           FEDQA_MIN_FREE_MB="8", FEDQA_LOG_FORMAT="text", FEDQA_PORT=port, HF_HUB_OFFLINE="1")
cli = [sys.executable, "-m", "service.cli"]
result = {}

def run(name, *args):
    p = subprocess.run(cli + list(args), env=env, capture_output=True, text=True, timeout=600)
    result[name] = {"rc": p.returncode, "stderr": p.stderr[-3000:], "stdout": p.stdout[-3000:]}

def active():
    path = os.path.join(fs, "home", "active.json")
    return json.load(open(path)) if os.path.exists(path) else None

run("first", "ingest", docs, "--quiet")
result["active_before"] = active()

def fill():  # leave 6 MiB free: below the 8 MiB reserve (appending, so a filler already there stays)
    st = os.statvfs(fs)
    with open(os.path.join(fs, "filler"), "ab") as f:
        f.write(b"x" * max(0, st.f_bavail * st.f_frsize - 6 * 2**20))

def free_mib():
    st = os.statvfs(fs)
    return st.f_bavail * st.f_frsize / 2**20

fill()
run("second", "ingest", changed, "--quiet")
result["active_after"] = active()
result["free_after_second"] = free_mib()  # a refused ingest's cleanup may free what it found (a killed build's leftovers)
fill()  # serve starts on a file system as full as the refused ingest found it
result["free_at_serve"] = free_mib()
proc = subprocess.Popen(cli + ["serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
ready = None
deadline = time.monotonic() + 300
while time.monotonic() < deadline and proc.poll() is None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
        if r.status_code in (200, 503) and "loading" not in r.text:
            ready = {"status": r.status_code, "body": r.text}
            break
    except httpx.TransportError:
        pass
    time.sleep(1)
result["serve_alive"] = proc.poll() is None
result["serve_ready"] = ready
proc.terminate()
result["serve_rc"] = proc.wait(timeout=60)
result["serve_log"] = proc.stderr.read()[-3000:]
json.dump(result, open(os.path.join(out, "result.json"), "w"))
"""


def _namespaces_work() -> bool:
    if UNSHARE is None or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run([UNSHARE, "-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@pytest.mark.timeout(1800)  # the driver alone may take 1500 s (its subprocess timeout) on a loaded machine
@pytest.mark.skipif(not _namespaces_work(), reason="no user and mount namespace to mount a small tmpfs in (unshare -Urm)")
def test_a_full_home_is_a_one_line_error_not_sigbus_and_keeps_the_active_version(tmp_path, fewlabel_cache):
    # Six pages on the ONNX encoder, whose export the run's shared cache holds (it stays outside the tmpfs).
    docs, changed = FEWLABEL_DOCS, tmp_path / "changed"
    shutil.copytree(docs, changed)
    page = "# Backups\n\nSitewright copies the built site to the backup folder every night and keeps seven copies.\n"
    (changed / "sitewright" / "backups.md").write_text(page, encoding="utf-8")  # a new passage: the second ingest must write
    fs, out = tmp_path / "fs", tmp_path / "out"
    fs.mkdir()
    out.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    cmd = [present(UNSHARE), "-Urm", sys.executable, str(driver), str(fs), str(docs), str(changed), str(out), str(free_port()), str(fewlabel_cache)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))

    assert result["first"]["rc"] == 0, result["first"]["stderr"]
    second = result["second"]
    assert second["rc"] == 2, f"ingest on a full tmpfs ended with {second['rc']} (-7: SIGBUS): {second['stderr']}"
    last = second["stderr"].strip().splitlines()[-1]
    assert "Traceback" not in second["stderr"] and last.startswith("fedqa: error: "), second["stderr"]
    assert "no space left" in last and "FEDQA_MIN_FREE_MB" in last and "tmpfs" in last and str(fs) in last
    assert result["active_after"] == result["active_before"] and result["active_before"]  # nothing lost

    assert result["serve_alive"], f"fedqa serve died (rc {result['serve_rc']}): {result['serve_log']}"
    ready = result["serve_ready"]
    assert result["free_at_serve"] < 8, result["free_at_serve"]
    assert ready is not None and ready["status"] == 503 and "no space left" in ready["body"], (ready, result["free_after_second"])
    assert len(list((fewlabel_cache / "onnx").iterdir())) == 1  # no process exported again
