"""Exporting a reranker's cross-encoder to ONNX Runtime int8 with the bi-encoder's recipe.

The sequence-classification model is traced with the eager attention (the graph ONNX Runtime's BERT optimizer
fuses), then :func:`service.retrieval.onnx_encoder.optimize_smooth_quantize` fuses it, smooths each int8 op's
input on calibration pairs (questions with passages of the corpus being indexed, not shipped text) and
quantises it dynamically to int8. Written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from service.reranking.model import pair_features
from service.retrieval.onnx_encoder import INPUTS, ONNX_FILE, OneOutput, OnnxExportError, optimize_smooth_quantize, quiet_logs

RECIPE = "torch.onnx(opset17,eager-attention)+ort-bert-optimizer+smoothed-inputs(per-op-grid,corpus-pairs)+dynamic-int8/1"
META_FILE = "fedqa_onnx.json"


def export_reranker(model_dir: Path, onnx_dir: Path, calibration: Sequence[tuple[str, str]], *, max_length: int) -> dict:
    """Export the cross-encoder in ``model_dir`` to ``onnx_dir``; ``calibration``: (question, passage) pairs.
    Returns the export's metadata (recipe, fused ops, smoothing per op)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    hf = AutoModelForSequenceClassification.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager").eval()
    onnx_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=onnx_dir.parent))
    try:
        with warnings.catch_warnings(), quiet_logs(), torch.inference_mode():
            warnings.simplefilter("ignore")
            sample = pair_features(tokenizer, "a short question", ["a somewhat longer passage of text"], max_length)
            names = [n for n in INPUTS if n in sample]
            torch.onnx.export(
                OneOutput(hf, names, "logits"),
                tuple(torch.from_numpy(sample[n]) for n in names),
                str(tmp / "fp32.onnx"),
                input_names=names,
                output_names=["logits"],
                opset_version=17,
                dynamo=False,
                dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, "logits": {0: "batch"}},
            )
            fused, smoothing = optimize_smooth_quantize(
                tmp / "fp32.onnx", tmp / ONNX_FILE, hf.config, _feeds(tokenizer, calibration, names, max_length)
            )
        meta = {"recipe": RECIPE, "inputs": names, "fused_ops": fused, "smoothing": smoothing, "max_length": max_length}
        meta["calibration_pairs"] = len(calibration)
        (tmp / META_FILE).write_text(json.dumps(meta))
        if onnx_dir.exists():
            shutil.rmtree(onnx_dir)
        os.replace(tmp, onnx_dir)
    except Exception as exc:
        raise OnnxExportError(f"reranker ONNX export to {onnx_dir} failed: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def _feeds(tokenizer, pairs: Sequence[tuple[str, str]], names: Sequence[str], max_length: int, batch: int = 8) -> Iterator[dict[str, np.ndarray]]:  # noqa: ANN001
    """Calibration batches: pairs grouped by question where they share one, padded per batch."""
    for i in range(0, len(pairs), batch):
        chunk = pairs[i : i + batch]
        questions, passages = [q for q, _ in chunk], [p for _, p in chunk]
        enc = tokenizer(questions, passages, padding=True, truncation="longest_first", max_length=max_length, return_tensors="np")
        yield {n: np.asarray(enc[n], dtype=np.int64) for n in names}
