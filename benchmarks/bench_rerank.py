"""What reranking costs per depth: the active reranker's logits for each dev question's top N, in-process.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/bench_rerank.py --n 100 [--depths 5 10 20 30] [--backend onnx|torch] [--threads N]

For each depth N, every question's merged top-N (the default strategy, not reranked) is scored by the reranker of
$FEDQA_HOME (its ONNX int8 export, or PyTorch): p50/p95 milliseconds per question, next to one bare PyTorch encode
of the question (the naive floor that bench_retrieval.py compares /ask with), timed in the same loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speed_common import FAQ6, emit, percentile, read_jsonl  # noqa: E402

from service.config import get_settings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default=str(FAQ6 / "queries_dev.jsonl"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20, 30])
    ap.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: FEDQA_RERANK_THREADS, else every CPU)")
    args = ap.parse_args()
    from sentence_transformers import SentenceTransformer

    from service.loading import load_pipeline
    from service.reranking.model import RerankBackend, Reranker
    from service.retrieval.encoder import packaged_minilm_path

    queries = read_jsonl(args.queries, "query")[: args.n]
    bare = SentenceTransformer(str(packaged_minilm_path()), device="cpu", local_files_only=True)
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        if pipeline.reranker is None:
            raise SystemExit(f"no reranker serves {get_settings().home_dir}: {pipeline.warnings}")
        threads = args.threads or get_settings().rerank_threads
        reranker = Reranker.load(pipeline.reranker.path, pipeline.reranker.version, backend=RerankBackend(args.backend), threads=threads)
        rankings = []
        for q in queries:
            hits = pipeline.retrieve(q, top_k=max(args.depths), gate_mode="deterministic", rerank=False).hits
            rankings.append([reranker.params.passage_text(h.passage.title, h.passage.text) for h in hits])
    finally:
        pipeline.close()
    for q, texts in list(zip(queries, rankings, strict=True))[:5]:  # warm-up
        reranker.logits(q, texts)
        bare.encode([q])
    out: dict[str, object] = {
        "figure": "reranking cost per depth",
        "backend": reranker.backend.value,
        "threads": reranker.threads,
        "n": len(queries),
        "reranker": reranker.version,
    }
    floor: list[float] = []
    for depth in args.depths:
        ms: list[float] = []
        for q, texts in zip(queries, rankings, strict=True):
            t0 = time.perf_counter()
            reranker.logits(q, texts[:depth])
            ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            bare.encode([q], normalize_embeddings=True)
            floor.append((time.perf_counter() - t0) * 1000)
        out[f"depth_{depth}_p50_ms"] = round(percentile(ms, 50), 2)
        out[f"depth_{depth}_p95_ms"] = round(percentile(ms, 95), 2)
    out["floor_bare_torch_encode_p50_ms"] = round(percentile(floor, 50), 2)
    out["floor_bare_torch_encode_p95_ms"] = round(percentile(floor, 95), 2)
    out["fitted_depth"] = reranker.params.depth
    emit(out)


if __name__ == "__main__":
    main()
