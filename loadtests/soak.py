"""Soak test: run ``fedqa serve`` as a subprocess, hit it for a bounded time, sample its memory (RSS).

    python loadtests/soak.py --home ~/fedqa-faq6-copy --duration 300

The traffic is a mix: retrieval-only /ask (most), invalid bodies (422), oversized top_k (422),
/healthz, /readyz and /metrics. RSS is sampled every --sample-every seconds from /proc; the
baseline (rss_start_mb) is the first sample after --warmup-s seconds of traffic (thread pools,
allocator arenas and caches are filled by then; rss_idle_mb is before any traffic). Prints
start/end/max RSS, the growth and the least-squares slope over the second half of the run
(MB per minute) as JSON; exits 1 when the growth exceeds --max-growth-mb or a 5xx was seen.
Only 127.0.0.1 is targeted; the run stops by itself after --duration seconds (at most 1800).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_queries, rss_bytes, serve  # noqa: E402

MB = 1024 * 1024


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time, in MB per minute."""
    if len(samples) < 2:
        return 0.0
    ts = [t for t, _ in samples]
    ys = [r / MB for _, r in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    den = sum((t - mt) ** 2 for t in ts)
    return 0.0 if den == 0 else 60.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den


def worker(base: str, queries: list[str], stop: threading.Event, counts: dict, lock: threading.Lock, seed: int) -> None:
    rnd = random.Random(seed)
    with httpx.Client(base_url=base, timeout=120) as client:
        while not stop.is_set():
            roll = rnd.random()
            try:
                if roll < 0.8:
                    r = client.post("/ask", json={"query": rnd.choice(queries), "generate": False})
                elif roll < 0.88:
                    r = client.post("/ask", content=b'{"query": 5}', headers={"content-type": "application/json"})
                elif roll < 0.92:
                    r = client.post("/ask", json={"query": rnd.choice(queries), "top_k": 10_000})
                elif roll < 0.96:
                    r = client.get(rnd.choice(["/healthz", "/readyz"]))
                else:
                    r = client.get("/metrics")
                key = "5xx" if r.status_code >= 500 else f"{r.status_code // 100}xx"
            except httpx.HTTPError as exc:
                key = f"error:{type(exc).__name__}"
            with lock:
                counts[key] = counts.get(key, 0) + 1


def soak(pid: int, base: str, queries: list[str], args: argparse.Namespace) -> dict:
    counts: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    threads = [threading.Thread(target=worker, args=(base, queries, stop, counts, lock, i), daemon=True) for i in range(args.concurrency)]
    rss_idle = rss_bytes(pid)
    t0 = time.monotonic()
    samples = [(0.0, rss_idle)]
    for t in threads:
        t.start()
    while time.monotonic() - t0 < args.duration:
        time.sleep(min(args.sample_every, max(0.0, args.duration - (time.monotonic() - t0))))
        samples.append((time.monotonic() - t0, rss_bytes(pid)))
    stop.set()
    for t in threads:
        t.join(timeout=130)
    elapsed = time.monotonic() - t0
    # Baseline: the first sample after the warm-up (thread pools, allocator arenas and caches filled by then).
    settled = [s for s in samples if s[0] >= args.warmup_s] or samples[-1:]
    base_t, base_rss = settled[0]
    rss = [r for _, r in settled]
    half = [s for s in settled if s[0] >= base_t + (elapsed - base_t) / 2]
    total = sum(counts.values())
    return {
        "duration_s": round(elapsed, 1),
        "warmup_s": args.warmup_s,
        "concurrency": args.concurrency,
        "requests": total,
        "req_per_s": round(total / elapsed, 2),
        "responses": dict(sorted(counts.items())),
        "rss_idle_mb": round(rss_idle / MB, 1),
        "rss_start_mb": round(base_rss / MB, 1),
        "rss_end_mb": round(rss[-1] / MB, 1),
        "rss_max_mb": round(max(rss) / MB, 1),
        "rss_growth_mb": round((rss[-1] - base_rss) / MB, 1),
        "slope_second_half_mb_per_min": round(slope_mb_per_min(half), 3),
        "samples_mb": [[round(t, 1), round(r / MB, 1)] for t, r in samples],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", required=True, help="FEDQA_HOME of the service to start (a copy: the store locks a version per process)")
    ap.add_argument("--port", type=int, default=8056)
    ap.add_argument("--duration", type=float, default=300, help="seconds of traffic, warm-up included (at most 1800)")
    ap.add_argument("--concurrency", type=int, default=4, help="client threads")
    ap.add_argument("--warmup-s", type=float, default=30.0, help="seconds of traffic before the RSS baseline")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--queries", help="JSONL questions (default: the demo's)")
    ap.add_argument("--max-growth-mb", type=float, default=50.0, help="exit 1 above this RSS growth")
    ap.add_argument("--service-log", help="write the service's log here")
    args = ap.parse_args(argv)
    if not 0 < args.duration <= 1800:
        ap.error("--duration must be in (0, 1800] seconds")
    queries = [q["query"] for q in load_queries(args.queries)]
    env = {"FEDQA_RATE_LIMIT_PER_MINUTE": "0", "FEDQA_LLM_BACKEND": "none", "FEDQA_LOG_LEVEL": "WARNING"}
    with serve(args.home, args.port, env=env, log_path=args.service_log) as proc:
        report = soak(proc.pid, f"http://127.0.0.1:{args.port}", queries, args)
    print(json.dumps(report))
    return 0 if report["rss_growth_mb"] <= args.max_growth_mb and not report["responses"].get("5xx") else 1


if __name__ == "__main__":
    sys.exit(main())
