"""The store alone as one product grows: build seconds, RSS, search p50/p95 at depth 20, recall@10 against exact.

    nice -n 19 .venv/bin/python benchmarks/bench_store_scale.py --home ~/.fedqa-faq6 --passages 20000 200000 1000000

Vectors: the 384-d passage vectors of a home's active index (faq6's own, read from a copy of its embedded shards),
each used in turn with a seeded perturbation (``--noise``: the norm of the added Gaussian, then re-normalised), so
that no encoder time is spent. Queries: other passages' vectors with a larger seeded perturbation (``--query-noise``).
Every size runs in its own process (RSS is that process's, the exact float32 copy for recall kept out of it) and is
measured with HNSW (``--index hnsw``), with the whole-shard int8 scan (``scan``) or as the settings choose (``auto``:
HNSW from FEDQA_HNSW_MIN_PASSAGES). Prints one JSON line per size and index.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_common import REPO, emit, percentile, rss_bytes  # noqa: E402

sys.path.insert(0, str(REPO))
CHUNK = 10_000


def _dense(vector: object) -> list[float]:
    """A point's dense vector, as a scroll returns it (a list, or a dict of named vectors holding one)."""
    if isinstance(vector, dict):
        vector = next(iter(vector.values()))
    assert isinstance(vector, list)
    return vector


def base_vectors(home: Path, cache: Path) -> np.ndarray:
    """The active index's passage vectors (cached as .npy): read from a copy, so a running service keeps its lock."""
    if cache.exists():
        return np.load(cache)
    from qdrant_edge import EdgeShard, ScrollRequest

    from service.artifacts import Registry

    registry = Registry(home)
    version = registry.active()["index"]
    if not version:
        raise SystemExit(f"no active index in {home}")
    out: list[list[float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(registry.path("index", version) / "shards", Path(tmp) / "shards")
        for shard_dir in sorted((Path(tmp) / "shards").iterdir()):
            shard, offset = EdgeShard.load(str(shard_dir)), None
            while True:
                records, offset = shard.scroll(ScrollRequest(offset=offset, limit=1024, with_vector=True))
                out.extend(_dense(r.vector) for r in records)
                if offset is None:
                    break
            shard.close()
    vectors = np.asarray(out, dtype=np.float32)
    np.save(cache, vectors)
    return vectors


def perturbed(base: np.ndarray, start: int, count: int, noise: float, seed: int) -> np.ndarray:
    """Vectors ``start .. start+count`` of the synthetic corpus: base vectors in turn plus seeded Gaussian noise."""
    rng = np.random.default_rng([seed, start])
    v = base[np.arange(start, start + count) % len(base)] + rng.standard_normal((count, base.shape[1]), dtype=np.float32) * (
        noise / np.sqrt(base.shape[1])
    )
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def exact_top(base: np.ndarray, n: int, queries: np.ndarray, args: argparse.Namespace, k: int = 10) -> np.ndarray:
    """Exact top-``k`` ids (float32 dot products over every vector, chunk by chunk)."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, n, CHUNK):
        block = perturbed(base, start, min(CHUNK, n - start), args.noise, args.seed)
        scores = queries @ block.T
        s = np.concatenate([best_s, scores], axis=1)
        i = np.concatenate([best_i, np.arange(start, start + block.shape[0])[None, :].repeat(len(queries), 0)], axis=1)
        top = np.argsort(-s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    return best_i


def one(args: argparse.Namespace) -> dict:
    """Build one shard of ``args.one`` passages in a fresh store, then measure it."""
    from service.artifacts import Registry
    from service.retrieval.edge_store import EdgeBackend, HnswPlan
    from service.retrieval.passage import Passage

    base = np.load(args.cache)
    n = args.one
    threshold = {"hnsw": 1, "scan": 2**62, "auto": args.min_passages}[args.index]
    plan = HnswPlan(min_passages=threshold, m=args.m, ef=args.ef)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        store = EdgeBackend(Registry(Path(tmp)), plan).open("v1", create=True)
        t0 = time.perf_counter()
        store.create_domain("product", base.shape[1])
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            passages = [Passage(f"p{i}", "product", "", "", "") for i in range(start, start + count)]
            store.upsert("product", passages, perturbed(base, start, count, args.noise, args.seed))
        store.finish()
        build_s = time.perf_counter() - t0
        rss = rss_bytes(os.getpid())
        rng = np.random.default_rng(args.seed + 1)
        q = base[rng.choice(len(base), args.queries, replace=False)]
        q = q + rng.standard_normal(q.shape, dtype=np.float32) * (args.query_noise / np.sqrt(base.shape[1]))
        q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
        ids = {Passage(f"p{i}", "product", "", "", "").point_id: i for i in range(n)}
        for v in q[:10]:  # warm-up
            store.search("product", v, args.depth)
        times, found = [], []
        for v in q:
            t = time.perf_counter()
            hits = store.search("product", v, args.depth)
            times.append((time.perf_counter() - t) * 1000)
            found.append([ids[h.point_id] for h in hits[:10]])
        stored = json.loads((Path(tmp) / "indexes" / "v1" / "shards" / "product" / "edge_config.json").read_text(encoding="utf-8"))
        graph = int((stored.get("hnsw_config") or {}).get("m") or 0) > 0
        store.close()
    truth = exact_top(base, n, q, args)
    recall = float(np.mean([len(set(f) & set(t.tolist())) / 10 for f, t in zip(found, truth, strict=True)]))
    return {
        "passages": n,
        "index": args.index,
        "hnsw_graph": graph,
        "build_s": round(build_s, 1),
        "rss_mib": round(rss / 2**20),
        "p50_ms": round(percentile(times, 50), 2),
        "p95_ms": round(percentile(times, 95), 2),
        "recall_at_10": round(recall, 4),
        "depth": args.depth,
        "queries": args.queries,
        "hnsw": {"m": args.m, "ef": args.ef} if graph else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, nargs="+", default=[20_000, 200_000, 1_000_000])
    ap.add_argument("--index", nargs="+", choices=["auto", "hnsw", "scan"], default=["hnsw", "scan"])
    ap.add_argument("--home", type=Path, default=Path("~/.fedqa").expanduser(), help="a home whose active index gives the base vectors")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "fedqa_store_scale_base.npy")
    ap.add_argument("--tmp", type=Path, default=None, help="where the stores are built (default: the system's temp)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--query-noise", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef", type=int, default=128)
    ap.add_argument("--min-passages", type=int, default=100_000, help="the HNSW threshold of --index auto")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        args.index = args.index[0]
        print(json.dumps(one(args)), flush=True)
        return
    base_vectors(args.home.expanduser(), args.cache)
    for n in args.passages:
        for index in args.index:
            cmd = [sys.executable, __file__, "--one", str(n), "--index", index, "--cache", str(args.cache)]
            for flag in ("queries", "depth", "noise", "query_noise", "seed", "m", "ef", "min_passages"):
                cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
            if args.tmp:
                cmd += ["--tmp", str(args.tmp)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(out.stderr)
            emit(json.loads(out.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
