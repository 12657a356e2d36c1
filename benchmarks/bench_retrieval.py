"""Retrieval latency over HTTP next to its floor, measured in the same run, question by question.

For each faq6 dev question: POST /ask {"generate": false} to a ``fedqa serve`` of $FEDQA_HOME
(started here), and one bare sentence-transformers PyTorch ``encode`` of the same question in this
process (the naive floor), in alternating blocks of questions with a pause between them (``--blocks``,
``--pause``). Prints p50/p95 of both, their ratio, and the server's own timings (``timings_ms``: embed,
router, gate with the fused strategy's searches, search, total) and the HTTP overhead around them. A second
pass over the same questions shows the query cache.

    FEDQA_HOME=<home> python benchmarks/bench_retrieval.py --n 200
    ... --client stdlib    # http.client on one keep-alive connection instead of httpx (less client overhead)
    ... --rerank off       # the served ranking without the reranker (FEDQA_RERANK=off)
Targets: without reranking (issue 13) p95 <= 0.7 x the bare encode's p95 and <= 12 ms on 2 quiet cores; with the
trained reranker (issue 32) p95 <= 5 x the bare encode's p95 (benchmarks/bench_rerank.py: the cost per depth).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import time
from collections.abc import Callable

import httpx
from speed_common import FAQ6, emit, percentile, read_jsonl, serve

SERVER_TIMINGS = ("embed", "router", "gate", "search", "rerank", "total")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default=os.environ.get("FEDQA_HOME"), help="data home to serve (default $FEDQA_HOME)")
    ap.add_argument("--queries", default=str(FAQ6 / "queries_dev.jsonl"))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--port", type=int, default=8061)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument(
        "--client",
        choices=["httpx", "stdlib"],
        default="httpx",
        help="HTTP client: httpx, or the standard library's http.client on one keep-alive connection (~1 ms less client CPU per request)",
    )
    ap.add_argument("--rerank", choices=["on", "off"], default="on", help="FEDQA_RERANK for the served home (on: the reranker, when trained)")
    ap.add_argument("--blocks", type=int, default=4, help="alternate the HTTP pass and the floor in this many blocks of questions")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds of rest between an HTTP block and a floor block")
    args = ap.parse_args()
    if not args.home:
        raise SystemExit("give --home or set FEDQA_HOME")
    from sentence_transformers import SentenceTransformer

    from service.retrieval.encoder import packaged_minilm_path

    queries = read_jsonl(args.queries, "query")[: args.n]
    bare = SentenceTransformer(str(packaged_minilm_path()), device="cpu", local_files_only=True)
    for i in range(args.warmup):
        bare.encode([f"warm-up question number {i}"])
    latency: list[float] = []
    floor: list[float] = []
    server: dict[str, list[float]] = {k: [] for k in (*SERVER_TIMINGS, "http_overhead")}
    env = {"FEDQA_LLM_BACKEND": "none", "FEDQA_RERANK": args.rerank}
    with serve(args.home, args.port, env=env), httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=60) as client:
        ask = _asker(args.client, client, args.port)
        for i in range(args.warmup):  # questions that are not measured: the cache stays cold for the run
            ask(f"warm-up question number {i}")
        # Block by block, the HTTP pass then the floor on the same questions, so that both sample the same
        # spells of the machine (a VM's speed drifts over minutes). The pauses let PyTorch's OpenMP threads,
        # which spin for a while after an encode, go to sleep before the server's next request.
        for block in _blocks(queries, args.blocks):
            for q in block:
                _timed_ask(ask, q, latency, server)
            time.sleep(args.pause)
            for q in block:
                t0 = time.perf_counter()
                bare.encode([q], normalize_embeddings=True)
                floor.append((time.perf_counter() - t0) * 1000)
            time.sleep(args.pause)
        cached = []
        for q in queries:
            t0 = time.perf_counter()
            ask(q)
            cached.append((time.perf_counter() - t0) * 1000)
        backend = client.get("/readyz").json()
    p = lambda v, q: round(percentile(v, q), 2)  # noqa: E731
    emit(
        {
            "figure": "retrieval over HTTP /ask generate=false",
            "home": args.home,
            "n": len(queries),
            "client": args.client,
            "rerank": args.rerank,
            "blocks": args.blocks,
            "http_p50_ms": p(latency, 50),
            "http_p95_ms": p(latency, 95),
            "floor_bare_torch_encode_p50_ms": p(floor, 50),
            "floor_bare_torch_encode_p95_ms": p(floor, 95),
            "ratio_p50": round(p(latency, 50) / p(floor, 50), 3),
            "ratio_p95": round(p(latency, 95) / p(floor, 95), 3),
            # Server side (timings_ms): gate = choosing the domains, with the fused strategy's searches of every domain;
            # http_overhead = HTTP time - the server's total (client, uvicorn, FastAPI, JSON).
            **{f"server_{k}_p50_ms": p(v, 50) for k, v in server.items()},
            **{f"server_{k}_p95_ms": p(v, 95) for k, v in server.items()},
            "repeated_questions_http_p50_ms": p(cached, 50),
            "repeated_questions_http_p95_ms": p(cached, 95),
            "readyz": backend,
        }
    )


def _blocks(items: list[str], n: int) -> list[list[str]]:
    """``items`` cut into ``n`` consecutive blocks of (nearly) equal size."""
    n = max(1, min(n, len(items)))
    bounds = [round(i * len(items) / n) for i in range(n + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _timed_ask(ask: Callable[[str], dict], q: str, latency: list[float], server: dict[str, list[float]]) -> None:
    """One /ask, its HTTP time and the server's own timings appended."""
    t0 = time.perf_counter()
    body = ask(q)
    latency.append((time.perf_counter() - t0) * 1000)
    timings = body["timings_ms"]
    for k in SERVER_TIMINGS:
        server[k].append(timings.get(k, 0.0 if k == "rerank" else float("nan")))
    server["http_overhead"].append(latency[-1] - timings.get("total", float("nan")))


def _asker(kind: str, client: httpx.Client, port: int) -> Callable[[str], dict]:
    """POST /ask {"query": q, "generate": false} with the chosen client; returns the JSON body (raises on an error status)."""
    if kind == "httpx":

        def ask(q: str) -> dict:
            r = client.post("/ask", json={"query": q, "generate": False})
            r.raise_for_status()
            return r.json()

        return ask
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def ask_stdlib(q: str) -> dict:
        conn.request("POST", "/ask", json.dumps({"query": q, "generate": False}), {"content-type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"/ask answered {r.status}: {body[:200]!r}")
        return json.loads(body)

    return ask_stdlib


if __name__ == "__main__":
    main()
