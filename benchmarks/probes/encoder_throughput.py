"""Probe: passages per second of each encoder runtime in this process, on faq6 passages, in alternating rounds.

    python benchmarks/probes/encoder_throughput.py --passages 400 --rounds 3 --runtimes onnx torch
    python benchmarks/probes/encoder_throughput.py --passages 1000 --runtimes bf16 onnx torch
    python benchmarks/probes/encoder_throughput.py --passages 0 --rounds 1 --runtimes onnx torch   # the whole corpus
    python benchmarks/probes/encoder_throughput.py --model $FEDQA_HOME/artifacts/retriever/VERSION --passages 0 --rounds 1

Every runtime is loaded (ONNX exported when missing, see encoder_fidelity.py) and warmed up on a few passages
first; then each round embeds the same passages (spread over docs.jsonl) with each runtime in turn, the order
reversed every other round, through ``Encoder.embed_passages(..., bulk=True)`` as ingest and index builds do:
``onnx`` ONNX int8 (batches of 8, one per core on the single-threaded session), ``torch`` PyTorch fp32 (batches of
32, PyTorch's own threads), ``bf16`` bf16 PyTorch weights (``bulk_bf16=True``: batches of 16, one per core; pays
only on CPUs with AMX-BF16, emulated and slow elsewhere). ``--threads``: workers per runtime (default: every
core). Prints wall and CPU seconds and passages per second of every round, one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from encoder_fidelity import load_encoder, spread  # noqa: E402
from speed_common import FAQ6, emit, read_jsonl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtimes", nargs="+", choices=["onnx", "torch", "bf16"], default=["onnx", "torch"])
    ap.add_argument("--model", help="a sentence-transformers folder (a trained retriever version); default: the base MiniLM")
    ap.add_argument("--passages", type=int, default=400, help="passages spread over faq6 (0: the whole corpus)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, help="workers (ONNX, bf16) or PyTorch threads (torch); default: every core")
    ap.add_argument("--corpus", type=Path, default=FAQ6 / "docs.jsonl")
    args = ap.parse_args()
    texts = [d["text"] for d in spread(read_jsonl(args.corpus), args.passages)]
    if args.threads and "torch" in args.runtimes:
        import torch

        torch.set_num_threads(args.threads)
    encoders = {}
    for runtime in args.runtimes:
        encoders[runtime] = load_encoder(runtime, args.model, args.threads)
        encoders[runtime].embed_passages(texts[:16], bulk=True)  # warm-up: loads the bf16 model, first-run allocations
    out: dict = {"figure": "encoders in-process, passages per second", "model": args.model or "base", "passages": len(texts)}
    out["max_seq_length"] = {r: e.max_seq_length for r, e in encoders.items()}
    out["rounds"] = {r: [] for r in args.runtimes}
    for i in range(args.rounds):
        for runtime in args.runtimes if i % 2 == 0 else args.runtimes[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            encoders[runtime].embed_passages(texts, bulk=True)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out["rounds"][runtime].append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "per_s": round(len(texts) / wall, 1)})
    out["per_s_range"] = {r: [min(x["per_s"] for x in v), max(x["per_s"] for x in v)] for r, v in out["rounds"].items()}
    emit(out)


if __name__ == "__main__":
    main()
