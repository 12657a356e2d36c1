"""Probe: how close an encoder runtime's vectors are to PyTorch fp32's, on faq6 passages and dev questions.

    python benchmarks/probes/encoder_fidelity.py --passages 400 --questions 0
    python benchmarks/probes/encoder_fidelity.py --passages 400 --questions 0 --calibration corpus
    python benchmarks/probes/encoder_fidelity.py --runtime bf16 --passages 400 --questions 0
    python benchmarks/probes/encoder_fidelity.py --model $FEDQA_HOME/artifacts/retriever/VERSION --passages 400

``--passages`` passages spread over the corpus (every k-th of docs.jsonl) and the first ``--questions`` faq6 dev
questions (0: all of them) are embedded by ``Encoder(backend="torch")`` (PyTorch fp32, the reference) and by the
runtime under test, as the service embeds them: passages through ``embed_passages(..., bulk=True)`` (ingest, index
builds), questions through ``embed_queries`` (one per batch on ONNX, as /ask). Runtimes: ``onnx`` (the ONNX int8
export of the model: for the base model the one in the per-user cache, for ``--model`` its ``onnx/`` folder,
exported there when missing) and ``bf16`` (bf16 bulk passages, ``bulk_bf16=True``; its questions stay on ONNX int8).
``--calibration``: the base model's export calibrated on the shipped demo passages (``demo``, what an index from
before corpus calibration has) or on a seeded sample of ``--corpus`` (``corpus``, what a first ingest of it makes),
each in its own folder of the per-user cache.
Prints the cosine to fp32 per text (mean and min, and 1 - mean) for passages and questions, one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speed_common import FAQ6, emit, read_jsonl  # noqa: E402

from service.config import get_settings  # noqa: E402
from service.retrieval.encoder import Encoder, base_onnx_dir, packaged_minilm_path  # noqa: E402
from service.retrieval.onnx_smoothing import Calibration, corpus_calibration  # noqa: E402


def load_encoder(runtime: str, model: str | None, threads: int | None = None, calibration: Calibration | None = None) -> Encoder:
    """The encoder of ``runtime`` (onnx, torch or bf16) for ``model`` (None: the shipped base MiniLM, its export
    calibrated on ``calibration``, None: the demo's); exits when ONNX was asked for and fell back to PyTorch."""
    path = Path(model) if model else packaged_minilm_path()
    fingerprint = calibration.fingerprint if calibration else None
    onnx_dir = path / "onnx" if model else base_onnx_dir(get_settings(), path, fingerprint)
    backend = "torch" if runtime == "torch" else "onnx"
    kept = calibration if not model else None
    encoder = Encoder(path, backend=backend, onnx_dir=onnx_dir, threads=threads, bulk_bf16=runtime == "bf16", calibration=kept)
    if encoder.backend.value != backend:
        raise SystemExit(f"ONNX encoder unavailable: {encoder.backend_error}")
    return encoder


def spread(docs: list[dict], n: int) -> list[dict]:
    """``n`` records taken every k-th over ``docs`` (all of them when ``n`` is 0 or larger)."""
    if n <= 0 or n >= len(docs):
        return docs
    return docs[:: len(docs) // n][:n]


def cosines(a: np.ndarray, b: np.ndarray) -> dict:
    """Mean and min of the row-wise cosine of ``a`` and ``b``, and 1 - mean."""
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    mean = float(cos.mean())
    return {"n": len(cos), "cos_mean": round(mean, 4), "cos_min": round(float(cos.min()), 4), "one_minus_mean": float(f"{1 - mean:.2e}")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", choices=["onnx", "bf16"], default="onnx", help="the runtime compared with PyTorch fp32")
    ap.add_argument("--model", help="a sentence-transformers folder (a trained retriever version); default: the base MiniLM")
    ap.add_argument("--passages", type=int, default=400, help="passages spread over faq6 (0: all)")
    ap.add_argument("--questions", type=int, default=0, help="the first N dev questions (0: all)")
    ap.add_argument("--corpus", type=Path, default=FAQ6 / "docs.jsonl")
    ap.add_argument("--queries", type=Path, default=FAQ6 / "queries_dev.jsonl")
    ap.add_argument("--calibration", choices=["demo", "corpus"], default="demo", help="the base export's calibration passages")
    args = ap.parse_args()
    corpus = read_jsonl(args.corpus)
    texts = [d["text"] for d in spread(corpus, args.passages)]
    calibration = corpus_calibration(d["text"] for d in corpus) if args.calibration == "corpus" else None
    questions = read_jsonl(args.queries, "query")
    questions = questions[: args.questions] if args.questions > 0 else questions
    out: dict = {"figure": f"{args.runtime} vectors vs PyTorch fp32", "model": args.model or "base", "calibration": args.calibration}
    vecs = {}
    for runtime in ("torch", args.runtime):
        t0 = time.perf_counter()
        encoder = load_encoder(runtime, args.model, calibration=calibration)
        vecs[runtime] = (encoder.embed_passages(texts, bulk=True), encoder.embed_queries(questions))
        out[runtime] = {"passages": encoder.passage_runtime, "queries": encoder.query_runtime, "max_seq_length": encoder.max_seq_length}
        out[runtime]["seconds"] = round(time.perf_counter() - t0, 1)
    out["passages"] = cosines(vecs[args.runtime][0], vecs["torch"][0])
    out["questions"] = cosines(vecs[args.runtime][1], vecs["torch"][1])
    emit(out)


if __name__ == "__main__":
    main()
