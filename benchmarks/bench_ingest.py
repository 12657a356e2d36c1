"""Ingest speed: passages/s of ``fedqa ingest`` next to a bare PyTorch encode of the same passages.

Takes ``--n`` faq6 passages (every k-th line, so every product and length is represented),
ingests them with ``python -m service.cli ingest`` into a fresh home (the ONNX export is made by a
first, tiny ingest and is not timed), and encodes the same texts with a bare sentence-transformers
PyTorch model at the same max_seq_length, batch 32 (the floor), in this process. ``--rounds 2`` (the default)
runs ingest, floor, floor, ingest and averages each side, so that drift of the machine's speed weighs on both.
Prints both rates and their ratio (ingest wall time / bare encode time; the whole command is timed: start-up,
segmenting, store writes), and the same ratio in CPU seconds. ``--n 0``: the whole corpus (the issue's figure;
with fewer passages the ingest's start-up, ~3-6 s, weighs more). With FEDQA_PASSAGE_BF16=on (or auto, where the CPU has
AMX) the ingest embeds passages in bf16 (``manifest_passage_runtimes`` says which runtime ran).

    python benchmarks/bench_ingest.py --n 2000            # FEDQA_ENCODER_BACKEND=onnx (default)
    FEDQA_ENCODER_BACKEND=torch python benchmarks/bench_ingest.py --n 500
Target (issue 13): ratio <= 0.4.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed_common import FAQ6, REPO, emit, read_jsonl


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ingest(home: Path, path: Path, backend: str) -> tuple[float, float]:
    """Wall and CPU seconds of one ``fedqa ingest --quiet`` run."""
    env = {**os.environ, "FEDQA_HOME": str(home), "HF_HUB_OFFLINE": "1", "FEDQA_ENCODER_BACKEND": backend}
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run([sys.executable, "-m", "service.cli", "ingest", str(path), "--quiet"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, _children_cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default=str(FAQ6 / "docs.jsonl"))
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--backend", default=os.environ.get("FEDQA_ENCODER_BACKEND", "onnx"), choices=["onnx", "torch"])
    ap.add_argument("--rounds", type=int, default=2, help="rounds of ingest and floor, in alternating order (2: ingest, floor, floor, ingest)")
    args = ap.parse_args()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    docs = read_jsonl(args.docs)
    n = args.n or len(docs)
    step = max(1, len(docs) // n)
    sample = docs[::step][:n]
    from sentence_transformers import SentenceTransformer

    from service.retrieval.encoder import packaged_minilm_path

    bare = SentenceTransformer(str(packaged_minilm_path()), device="cpu", local_files_only=True)
    bare.encode(["A first passage."] * 4, batch_size=32)  # the floor's first call is not timed either
    texts = [d["text"] for d in sample]
    t_ingest = cpu_ingest = t_floor = cpu_floor = 0.0
    recorded: list = []
    runtimes: list = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        warm, data = tmp / "warm.jsonl", tmp / "sample.jsonl"
        warm.write_text(json.dumps({"doc_id": "warm/0", "domain": "warmup", "text": "A first passage."}) + "\n")
        data.write_text("".join(json.dumps(d) + "\n" for d in sample))
        # Round r runs the ingest then the floor (r even) or the floor then the ingest (r odd): with --rounds 2 the
        # order is ingest, floor, floor, ingest, so a machine that speeds up or slows down during the run weighs
        # on both sides alike.
        for r in range(args.rounds):
            home = tmp / f"home-{r}"
            if r:  # the first home's model export, so that later homes do not export again
                shutil.copytree(tmp / "home-0" / "cache", home / "cache")
            ingest(home, warm, args.backend)  # the first one exports the model (not timed)
            for step_name in ("ingest", "floor") if r % 2 == 0 else ("floor", "ingest"):
                if step_name == "ingest":
                    wall, cpu = ingest(home, data, args.backend)
                    t_ingest, cpu_ingest = t_ingest + wall, cpu_ingest + cpu
                else:
                    t0, c0 = time.perf_counter(), time.process_time()
                    bare.encode(texts, batch_size=32, normalize_embeddings=True)
                    t_floor, cpu_floor = t_floor + time.perf_counter() - t0, cpu_floor + time.process_time() - c0
                    time.sleep(1.0)  # PyTorch's OpenMP threads spin for a while after an encode: not into the ingest
            manifests = sorted(home.glob("indexes/*/manifest.json")) or sorted(home.rglob("manifest.json"))
            recorded += [json.loads(m.read_text()).get("encoder_backend") for m in manifests]
            runtimes += [json.loads(m.read_text()).get("passage_runtime") for m in manifests]
    t_ingest, cpu_ingest, t_floor, cpu_floor = (x / args.rounds for x in (t_ingest, cpu_ingest, t_floor, cpu_floor))
    emit(
        {
            "figure": "fedqa ingest passages/s",
            "backend": args.backend,
            "passages": len(sample),
            "rounds": args.rounds,
            "ingest_seconds": round(t_ingest, 1),
            "ingest_passages_per_s": round(len(sample) / t_ingest, 1),
            "floor_bare_torch_encode_seconds": round(t_floor, 1),
            "floor_passages_per_s": round(len(sample) / t_floor, 1),
            "max_seq_length": bare.max_seq_length,
            "ratio_ingest_to_bare": round(t_ingest / t_floor, 3),
            "ingest_cpu_seconds": round(cpu_ingest, 1),
            "floor_cpu_seconds": round(cpu_floor, 1),
            "cpu_ratio_ingest_to_bare": round(cpu_ingest / cpu_floor, 3),
            "manifest_encoder_backends": recorded,
            "manifest_passage_runtimes": runtimes,
            "load_1_5_15_at_start": load_at_start,
        }
    )


if __name__ == "__main__":
    main()
