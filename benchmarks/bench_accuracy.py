"""Accuracy cost and encode speed of the ONNX int8 encoder (and of bf16 bulk passages) next to PyTorch fp32.

Pool: every gold passage of the faq6 dev questions plus every k-th other passage up to ``--pool``.
Both runtimes embed the pool and the questions in this process; prints Acc@1 and MRR@10 of each
(search over the whole pool, exact dot product) and the encode time of each, wall and CPU. ``onnx_bf16``: the
passages embedded as ingest embeds them with FEDQA_PASSAGE_BF16=on (PyTorch bf16, ``bulk``), the questions with ONNX int8
(process CPU seconds are less sensitive to other jobs on a shared machine than wall time).
For the figure over the whole faq6 corpus use ``fedqa models evaluate`` on two indexes, one
ingested with each backend (FEDQA_ENCODER_BACKEND=onnx|torch).

    python benchmarks/bench_accuracy.py --pool 3000
Target (issue 13): Acc@1 within 1 point of PyTorch fp32.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from speed_common import FAQ6, emit, read_jsonl


def scores(q: np.ndarray, d: np.ndarray, ids: list[str], gold: list[set[str]]) -> dict:
    """Acc@1 and MRR@10 (percent) of exact search."""
    top = np.argsort(-(q @ d.T), axis=1)[:, :10]
    acc = np.mean([ids[t[0]] in g for t, g in zip(top, gold, strict=True)])
    mrr = np.mean([next((1 / (r + 1) for r, i in enumerate(t) if ids[i] in g), 0.0) for t, g in zip(top, gold, strict=True)])
    return {"acc_at_1": round(100 * acc, 2), "mrr_at_10": round(100 * mrr, 2)}


def timed(fn):  # noqa: ANN001, ANN201
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - w, 1), round(time.process_time() - c, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool", type=int, default=3000)
    ap.add_argument("--onnx-dir", help="where the ONNX export is (made there when missing); default: a temporary folder")
    args = ap.parse_args()
    from service.retrieval.encoder import Encoder

    questions = [q for q in read_jsonl(FAQ6 / "queries_dev.jsonl") if q.get("gold_doc_ids")]
    gold = [set(q["gold_doc_ids"]) for q in questions]
    docs = read_jsonl(FAQ6 / "docs.jsonl")
    wanted = set().union(*gold)
    pool = [d for d in docs if d["doc_id"] in wanted]
    rest = [d for d in docs if d["doc_id"] not in wanted]
    pool += rest[:: max(1, len(rest) // max(1, args.pool - len(pool)))][: max(0, args.pool - len(pool))]
    ids, texts, qtexts = [d["doc_id"] for d in pool], [d["text"] for d in pool], [q["query"] for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        onnx_dir = Path(args.onnx_dir) if args.onnx_dir else Path(tmp) / "onnx"
        onnx = Encoder(backend="onnx", onnx_dir=onnx_dir)
        torch = Encoder(backend="torch")
        bf16 = Encoder(backend="onnx", onnx_dir=onnx_dir, bulk_bf16=True)
        out: dict = {
            "figure": "Acc@1 onnx int8 vs torch fp32 (faq6 dev, sub-corpus)",
            "questions": len(questions),
            "pool": len(pool),
            "onnx_backend_in_use": onnx.backend.value,
        }
        for name, enc, bulk in (("torch", torch, False), ("onnx", onnx, False), ("onnx_bf16", bf16, True)):
            d, wall, cpu = timed(lambda enc=enc, bulk=bulk: enc.embed_passages(texts, bulk=bulk))
            q = enc.embed_queries(qtexts)
            out[name] = {**scores(q, d, ids, gold), "encode_pool_wall_s": wall, "encode_pool_cpu_s": cpu}
    out["acc_at_1_delta_points"] = round(out["onnx"]["acc_at_1"] - out["torch"]["acc_at_1"], 2)
    out["acc_at_1_delta_points_bf16_passages"] = round(out["onnx_bf16"]["acc_at_1"] - out["torch"]["acc_at_1"], 2)
    out["encode_cpu_ratio_onnx_to_torch"] = round(out["onnx"]["encode_pool_cpu_s"] / out["torch"]["encode_pool_cpu_s"], 3)
    out["encode_wall_ratio_onnx_to_torch"] = round(out["onnx"]["encode_pool_wall_s"] / out["torch"]["encode_pool_wall_s"], 3)
    out["encode_wall_ratio_bf16_to_torch"] = round(out["onnx_bf16"]["encode_pool_wall_s"] / out["torch"]["encode_pool_wall_s"], 3)
    emit(out)


if __name__ == "__main__":
    main()
