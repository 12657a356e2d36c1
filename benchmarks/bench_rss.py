"""Memory of ``fedqa serve``: resident set size after start-up and after answering questions.

Starts ``fedqa serve`` on $FEDQA_HOME (LLM off: the retrieval service), reads its RSS once ready
and after ``--n`` retrieval questions, next to its floor: a bare Python process holding the
sentence-transformers PyTorch MiniLM after one encode.

    FEDQA_HOME=<home> python benchmarks/bench_rss.py
    python benchmarks/bench_rss.py --demo                # a first 'fedqa serve --demo' on a new home
    python benchmarks/bench_rss.py --demo --fresh-cache  # ... with an empty per-user cache (the ONNX export redone)

With ``--demo`` the home is a new temporary one (unless ``--home`` is given), so the server builds the demo
(ingest, router, answer policy, not-covered decision) before it serves, and the figure is that first run's RSS.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from speed_common import FAQ6, emit, read_jsonl, rss_bytes, serve

FLOOR = (
    "import resource\n"
    "from sentence_transformers import SentenceTransformer\n"
    "from service.retrieval.encoder import packaged_minilm_path\n"
    "SentenceTransformer(str(packaged_minilm_path()), device='cpu', local_files_only=True).encode(['a question'])\n"
    "print([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default=os.environ.get("FEDQA_HOME"))
    ap.add_argument("--queries", default=str(FAQ6 / "queries_dev.jsonl"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--port", type=int, default=8062)
    ap.add_argument("--demo", action="store_true", help="serve --demo on a new home (the demo's questions are asked)")
    ap.add_argument("--fresh-cache", action="store_true", help="with --demo: an empty per-user cache (FEDQA_CACHE)")
    args = ap.parse_args()
    env = {"FEDQA_LLM_BACKEND": "none"}
    work = Path(tempfile.mkdtemp(prefix="fedqa-rss-"))
    if args.demo:
        from service.demo import QUERIES

        args.home = args.home or str(work / "home")
        args.queries = str(QUERIES)
        if args.fresh_cache:
            env["FEDQA_CACHE"] = str(work / "cache")
    if not args.home:
        raise SystemExit("give --home or set FEDQA_HOME")
    queries = read_jsonl(args.queries, "query")[: args.n]
    t0 = time.perf_counter()
    with (
        serve(args.home, args.port, env=env, args=["--demo"] if args.demo else [], ready_timeout_s=1800, log_path=work / "serve.log") as proc,
        httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=60) as client,
    ):
        ready_seconds = time.perf_counter() - t0
        ready = rss_bytes(proc.pid)
        for q in queries:
            client.post("/ask", json={"query": q, "generate": False}).raise_for_status()
        after = rss_bytes(proc.pid)
        versions = client.get("/readyz").json().get("versions")
    floor_kib = int(subprocess.run([sys.executable, "-c", FLOOR], capture_output=True, text=True, check=True).stdout.split()[-1])
    mib = lambda b: round(b / 2**20, 1)  # noqa: E731
    emit(
        {
            "figure": "fedqa serve RSS",
            "home": args.home,
            "demo_first_run": args.demo,
            "fresh_cache": bool(args.demo and args.fresh_cache),
            "seconds_to_ready": round(ready_seconds, 1),
            "versions": versions,
            "rss_ready_mib": mib(ready),
            f"rss_after_{len(queries)}_questions_mib": mib(after),
            "floor_bare_torch_minilm_process_mib": round(floor_kib / 1024, 1),
        }
    )


if __name__ == "__main__":
    main()
