"""Latency of /ask: p50/p95 of the retrieval path (generate=false) and of full answers.

Runs in-process through the ASGI app (FastAPI included) on the active versions of $FEDQA_HOME,
or against a running service with --url. Benchmark on a quiet machine: two CPU-heavy jobs at
once slow each other down many times over.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/bench_ask.py --queries ../shared/data/faq6/queries_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def run(post, queries: list[str], generate: bool) -> tuple[list[float], dict[str, list[float]], int]:
    wall: list[float] = []
    stages: dict[str, list[float]] = {}
    failures = 0
    for q in queries:
        t0 = time.perf_counter()
        status, body = post({"query": q, "generate": generate, "gate": "deterministic"})
        wall.append((time.perf_counter() - t0) * 1000)
        if status != 200:
            failures += 1
            continue
        for k, v in body.get("timings_ms", {}).items():
            if "." not in k:
                stages.setdefault(k, []).append(v)
    return wall, stages, failures


def report(name: str, wall: list[float], stages: dict[str, list[float]], failures: int) -> dict:
    out = {
        "path": name,
        "n": len(wall),
        "failures": failures,
        "p50_ms": round(percentile(wall, 50), 1),
        "p95_ms": round(percentile(wall, 95), 1),
        "mean_ms": round(statistics.fmean(wall), 1),
        "stages_p50_ms": {k: round(percentile(v, 50), 2) for k, v in stages.items()},
    }
    print(json.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", required=True, help="JSONL with a 'query' field per line")
    ap.add_argument("--n", type=int, default=200, help="retrieval-path queries (cycled)")
    ap.add_argument("--n-full", type=int, default=20, help="full /ask queries (the LLM is slow on CPU)")
    ap.add_argument("--url", help="benchmark a running service instead of in-process")
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    queries = [json.loads(line)["query"] for line in Path(args.queries).read_text(encoding="utf-8").splitlines() if line.strip()]
    pick = lambda n: [queries[i % len(queries)] for i in range(n)]  # noqa: E731

    if args.url:
        import httpx

        client = httpx.Client(base_url=args.url, timeout=300)

        def post(body: dict) -> tuple[int, dict]:
            r = client.post("/ask", json=body)
            return r.status_code, r.json()

        ctx = None
    else:
        from fastapi.testclient import TestClient

        from service.api.app import create_app

        ctx = TestClient(create_app())
        client = ctx.__enter__()

        def post(body: dict) -> tuple[int, dict]:
            r = client.post("/ask", json=body)
            return r.status_code, r.json()

    try:
        run(post, pick(args.warmup), generate=False)
        report("retrieval (generate=false)", *run(post, pick(args.n), generate=False))
        if args.n_full:
            report("full /ask (generate=true)", *run(post, pick(args.n_full), generate=True))
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
