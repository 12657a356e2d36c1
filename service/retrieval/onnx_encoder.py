"""ONNX Runtime for the bi-encoder: export once per model version, then run int8 on the CPU.

The export is the sentence-transformers model's transformer (``last_hidden_state``), graph-optimised
by ONNX Runtime's transformer optimizer (fused LayerNorm/GELU) and dynamically quantised to int8
(weights of the dense layers only: activation x activation products such as attention scores stay
fp32, which keeps the vectors within ~0.99 cosine of fp32). Pooling and normalisation are read from
the model's own sentence-transformers modules, so the vectors match ``SentenceTransformer.encode``.

An :class:`onnxruntime.InferenceSession` is thread-safe: concurrent requests need no lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("fedqa.encoder")

ONNX_DIR = "onnx"
ONNX_FILE = "model_qint8.onnx"
META_FILE = "fedqa_onnx.json"
RECIPE = "torch.onnx(opset17)+ort-bert-optimizer+dynamic-int8(matmul-const-b,per-channel)/1"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxExportError(RuntimeError):
    """The model could not be exported to (or loaded from) ONNX."""


@dataclass(frozen=True)
class OnnxExport:
    """Where an exported model lies and what it was made from."""

    path: Path
    source: str
    recipe: str


def exported(onnx_dir: Path, source: str) -> OnnxExport | None:
    """The export in ``onnx_dir`` when it is complete and was made from ``source`` by this recipe."""
    meta_path = onnx_dir / META_FILE
    if not (onnx_dir / ONNX_FILE).is_file() or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("source") != source or meta.get("recipe") != RECIPE:
        return None
    return OnnxExport(onnx_dir / ONNX_FILE, source, RECIPE)


def export_onnx(model, onnx_dir: Path, *, source: str) -> OnnxExport:  # noqa: ANN001 - a SentenceTransformer
    """Export ``model``'s transformer to ``onnx_dir`` (optimised, int8), unless already there.

    Written into a temporary folder and renamed into place, so a crash never leaves half an export.
    """
    done = exported(onnx_dir, source)
    if done:
        return done
    try:
        import onnxruntime.quantization  # noqa: F401
        import onnxruntime.transformers.optimizer  # noqa: F401
    except ImportError as exc:  # pragma: no cover - onnxruntime is a dependency
        raise OnnxExportError(f"onnxruntime is not installed: {exc}") from exc
    hf = _transformer(model)
    onnx_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=onnx_dir.parent))
    # The exporter and quantizer chat at INFO on the root logger and warn about tracing: keep the log readable.
    with warnings.catch_warnings(), _quiet_info_logs():
        warnings.simplefilter("ignore")
        result = _export(model, hf, tmp, onnx_dir, source)
    log.info("exported the encoder to ONNX int8 at %s", onnx_dir)
    return result


@contextlib.contextmanager
def _quiet_info_logs():  # noqa: ANN202
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


def _export(model, hf, tmp: Path, onnx_dir: Path, source: str) -> OnnxExport:  # noqa: ANN001
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        features = model.tokenizer(["a short question", "a somewhat longer passage of text"], padding=True, return_tensors="pt")
        names = [n for n in INPUTS if n in features]
        wrapper = _LastHiddenState(hf, names)
        with torch.inference_mode():
            torch.onnx.export(
                wrapper, tuple(features[n] for n in names), str(tmp / "fp32.onnx"), input_names=names,
                output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
            )
        optimized = optimize_model(str(tmp / "fp32.onnx"), model_type="bert", num_heads=0, hidden_size=0, opt_level=1)
        optimized.save_model_to_file(str(tmp / "optimized.onnx"))
        quantize_dynamic(
            str(tmp / "optimized.onnx"), str(tmp / ONNX_FILE), weight_type=QuantType.QInt8, per_channel=True,
            op_types_to_quantize=["MatMul"], extra_options={"DefaultTensorType": 1, "MatMulConstBOnly": True},
        )
        for name in ("fp32.onnx", "optimized.onnx"):
            (tmp / name).unlink()
        (tmp / META_FILE).write_text(json.dumps({"source": source, "recipe": RECIPE, "inputs": names}))
        if onnx_dir.exists():
            shutil.rmtree(onnx_dir)
        os.replace(tmp, onnx_dir)
    except Exception as exc:
        raise OnnxExportError(f"ONNX export to {onnx_dir} failed: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return OnnxExport(onnx_dir / ONNX_FILE, source, RECIPE)


def _transformer(model):  # noqa: ANN001, ANN202
    """The Hugging Face model inside a [Transformer, Pooling, (Normalize)] sentence-transformers model."""
    from sentence_transformers.models import Normalize, Pooling

    modules = list(model)
    if len(modules) < 2 or not isinstance(modules[1], Pooling) or any(not isinstance(m, Normalize) for m in modules[2:]):
        raise OnnxExportError(f"unsupported module stack for ONNX: {[type(m).__name__ for m in modules]}")
    if modules[1].pooling_mode not in POOLERS:
        raise OnnxExportError(f"unsupported pooling for ONNX: {modules[1].pooling_mode}")
    hf = getattr(modules[0], "auto_model", None) or getattr(modules[0], "model", None)
    if hf is None:
        raise OnnxExportError("no transformer model found in the first module")
    return hf


class _LastHiddenState:
    """Wraps a Hugging Face encoder so torch.onnx.export sees positional inputs and one output."""

    def __new__(cls, hf, names: Sequence[str]):  # noqa: ANN001, ANN204
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.hf = hf

            def forward(self, *tensors):  # noqa: ANN002, ANN202
                return self.hf(**dict(zip(names, tensors, strict=False))).last_hidden_state

        return Wrapper().eval()


def _mean(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    return (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)


def _cls(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return hidden[:, 0]


POOLERS = {"mean": _mean, "cls": _cls}


class OnnxSession:
    """Runs an exported encoder: tokenise, one session run per batch, pool, L2-normalise."""

    def __init__(self, export: OnnxExport, *, tokenizer, max_seq_length: int, pooling: str, threads: int | None = None) -> None:  # noqa: ANN001
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(export.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise OnnxExportError(f"cannot load {export.path}: {exc}") from exc
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.pool = POOLERS[pooling]

    def encode(self, texts: Sequence[str], *, batch_size: int, bar=None) -> np.ndarray:  # noqa: ANN001 - a tqdm bar
        """Unit-length vectors of ``texts``; batches are formed in length order (little padding)."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            features = self.tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="np"
            )
            feed = {n: features[n].astype(np.int64) for n in self.inputs if n in features}
            for n in self.inputs:
                feed.setdefault(n, np.zeros_like(feed["input_ids"]))
            hidden = self.session.run(None, feed)[0]
            vecs = self.pool(hidden, features["attention_mask"])
            vecs /= np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
            if out.shape[1] == 0:
                out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
            if bar is not None:
                bar.update(len(idx))
        return out
