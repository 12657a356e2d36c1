"""ONNX Runtime for the bi-encoder: export once per model version, then run int8 on the CPU.

The export is the sentence-transformers model's transformer (``last_hidden_state``) traced with the
eager attention (the graph ONNX Runtime's BERT optimizer recognises, unlike transformers' SDPA one),
graph-optimised into fused Attention/EmbedLayerNormalization ops (the residual Add + LayerNormalization and the
bias Add + Gelu are left unfused, in the export and when a session loads it: :data:`UNFUSED`) and
dynamically quantised to int8 (the dense weights and the attention's input projection, per channel;
activations are quantised per batch at run time, after a per-channel smoothing of each op's input chosen
on calibration passages, a sample of the corpus the export embeds: :mod:`service.retrieval.onnx_smoothing`). On faq6 the passages' vectors lie at
cosine 0.998 from fp32 on average (0.995 at worst), the questions' at 0.999. Pooling and normalisation are
read from the model's own sentence-transformers modules, so the vectors match ``SentenceTransformer.encode``.

An export is stored with the recipe that made it (:data:`RECIPE`, with its calibration term: :func:`recipe`) and
its calibration passages (:data:`CALIBRATION_FILE`): a changed recipe makes every stored export stale, and the next
load exports again, on the same passages.
An :class:`onnxruntime.InferenceSession` is thread-safe: concurrent requests need no lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from service.compute import available_cpus
from service.retrieval.batching import by_length, unit_rows
from service.retrieval.onnx_smoothing import Calibration, demo_calibration, smooth
from service.retrieval.tokens import EncoderTokenizer

log = logging.getLogger("fedqa.encoder")

ONNX_DIR = "onnx"
ONNX_FILE = "model_qint8.onnx"
META_FILE = "fedqa_onnx.json"
#: The calibration passages of an export, stored with it (:meth:`Calibration.save`).
CALIBRATION_FILE = "calibration.json"
#: The recipe of an export calibrated on the shipped demo passages; :func:`recipe` names another calibration.
RECIPE = (
    "torch.onnx(opset17,eager-attention)+ort-bert-optimizer(fused-attention,unfused-skip-layernorm-and-bias-gelu)"
    "+smoothed-inputs(per-op-grid,demo-calibration)+dynamic-int8(matmul,attention,per-channel)/4"
)
DEMO_TERM = "demo-calibration"
CORPUS_TERM = re.compile(r"corpus-calibration\([^)]*\)")
#: Ops the BERT optimizer must fuse for the recipe to pay off; counts are logged and stored with the export.
FUSED_OPS = ("Attention", "EmbedLayerNormalization")
#: ONNX Runtime fusions left out of the export and turned off when a session loads it: the CPU kernels of
#: SkipLayerNormalization and BiasGelu are slower than the Add + LayerNormalization and Add + Gelu they replace
#: (faq6 passages at 256 tokens, 2 cores, onnxruntime 1.32: 75 -> 90 passages/s at the same vectors; docs/speed.md).
UNFUSED = ("SkipLayerNormFusion", "BiasGeluFusion")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxExportError(RuntimeError):
    """The model could not be exported to (or loaded from) ONNX."""


@dataclass(frozen=True)
class OnnxExport:
    """Where an exported model lies, what it was made from, and how to run it without loading the PyTorch model."""

    path: Path
    source: str
    recipe: str
    max_seq_length: int
    pooling: str
    dim: int
    lower_case: bool = False
    #: What the smoothing was calibrated on (:meth:`Calibration.record`); exports from before it was recorded: demo.
    calibration: Mapping[str, str | int] = field(default_factory=lambda: {"source": "demo"})


def recipe(calibration: Calibration) -> str:
    """The recipe of an export calibrated on ``calibration``: :data:`RECIPE` with its calibration term."""
    return RECIPE.replace(DEMO_TERM, calibration.term)


def same_steps(stored: str) -> bool:
    """Whether recipe ``stored`` is :data:`RECIPE` but for what it was calibrated on (the same steps, this code)."""
    return CORPUS_TERM.sub(DEMO_TERM, stored) == RECIPE


def exported(onnx_dir: Path, source: str, *, any_recipe: bool = False, calibration: str | None = None) -> OnnxExport | None:
    """The export in ``onnx_dir`` when it is complete and was made from ``source`` by this recipe, calibrated on any
    passages (``calibration``: on those of this fingerprint). ``any_recipe``: by any recipe; an earlier one runs the
    same model, only slower."""
    meta_path = onnx_dir / META_FILE
    if not (onnx_dir / ONNX_FILE).is_file() or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("source") != source or not (any_recipe or same_steps(str(meta.get("recipe")))):
        return None
    record = meta.get("calibration") if isinstance(meta.get("calibration"), dict) else {"source": "demo"}
    if calibration is not None and record.get("fingerprint") != calibration:
        return None
    try:
        return OnnxExport(
            onnx_dir / ONNX_FILE,
            source,
            str(meta.get("recipe")),
            int(meta["max_seq_length"]),
            str(meta["pooling"]),
            int(meta["dim"]),
            bool(meta.get("lower_case", False)),
            dict(record),
        )
    except (KeyError, TypeError, ValueError):
        return None


def export_onnx(model, onnx_dir: Path, *, source: str, calibration: Calibration | None = None) -> OnnxExport:  # noqa: ANN001 - a SentenceTransformer
    """Export ``model``'s transformer to ``onnx_dir`` (optimised, int8) with its smoothing calibrated on
    ``calibration``, unless such an export is there (None: any; an export is made on the passages stored with a
    stale one in ``onnx_dir``, else on the shipped demo's).

    Written into a temporary folder and renamed into place, so a crash never leaves half an export.
    """
    done = exported(onnx_dir, source, calibration=calibration.fingerprint if calibration else None)
    if done:
        return done
    calibration = calibration or Calibration.load(onnx_dir / CALIBRATION_FILE) or demo_calibration()
    try:
        import onnxruntime.quantization  # noqa: F401
        import onnxruntime.transformers.optimizer  # noqa: F401
    except ImportError as exc:  # pragma: no cover - onnxruntime is a dependency
        raise OnnxExportError(f"onnxruntime is not installed: {exc}") from exc
    hf = _transformer(model)
    log.info(
        "exporting the encoder to ONNX int8 at %s, %s (once per model, recipe and calibration; about a minute on 2 cores)",
        onnx_dir,
        calibration.term,
    )
    onnx_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=onnx_dir.parent))
    # The exporter and quantizer chat on the root logger (INFO, and a WARNING advising pre-processing)
    # and warn about tracing: keep the log readable.
    with warnings.catch_warnings(), quiet_logs():
        warnings.simplefilter("ignore")
        result = _export(model, hf, tmp, onnx_dir, source, calibration)
    fused = json.loads((onnx_dir / META_FILE).read_text())["fused_ops"]
    if not all(fused.values()):
        log.warning("the ONNX optimizer left some ops unfused (a slower encoder): %s", fused)
    log.info("exported the encoder to ONNX int8 at %s", onnx_dir)
    return result


@contextlib.contextmanager
def quiet_logs():  # noqa: ANN202
    """No INFO records, and no warnings logged on the root logger itself (named loggers' warnings pass)."""

    def drop(record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING

    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    logging.root.addFilter(drop)
    try:
        yield
    finally:
        logging.root.removeFilter(drop)
        logging.disable(previous)


def optimize_smooth_quantize(
    fp32: Path,
    out: Path,
    config,
    feeds: Iterable[dict[str, np.ndarray]],  # noqa: ANN001 - a transformers PretrainedConfig
) -> tuple[dict[str, int], dict[str, dict[str, float | str]]]:
    """The recipe's steps after tracing, shared by the bi-encoder and the reranker: BERT graph fusions (but
    :data:`UNFUSED`), each int8 op's input smoothed on ``feeds`` (calibration batches), dynamic int8; ``fp32`` becomes
    ``out`` (the intermediate files are removed). Returns the fused-op counts and the smoothing chosen per op."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    fusions = FusionOptions("bert")
    fusions.enable_skip_layer_norm = False  # UNFUSED
    fusions.enable_bias_gelu = False
    optimized = optimize_model(
        str(fp32),
        model_type="bert",
        num_heads=int(config.num_attention_heads),
        hidden_size=int(config.hidden_size),
        opt_level=1,
        optimization_options=fusions,
    )
    fused = {op: int(optimized.get_fused_operator_statistics().get(op, 0)) for op in FUSED_OPS}
    smoothing = smooth(optimized.model, feeds)
    middle = out.with_name("optimized.onnx")
    optimized.save_model_to_file(str(middle))
    quantize_dynamic(
        str(middle),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul", "Attention"],
        extra_options={"DefaultTensorType": 1, "MatMulConstBOnly": True},
    )
    fp32.unlink()
    middle.unlink()
    return fused, smoothing


def _export(model, hf, tmp: Path, onnx_dir: Path, source: str, calibration: Calibration) -> OnnxExport:  # noqa: ANN001
    try:
        names = _trace(model, hf, tmp / "fp32.onnx")
        feeds = _calibration_feeds(model, names, calibration.texts)
        fused, smoothing = optimize_smooth_quantize(tmp / "fp32.onnx", tmp / ONNX_FILE, hf.config, feeds)
        spec = {
            "max_seq_length": int(model.max_seq_length),
            "pooling": model[1].pooling_mode,
            "dim": int(model.get_embedding_dimension()),
            "lower_case": bool(getattr(model[0], "do_lower_case", False)),
        }
        made = recipe(calibration)
        meta = {"source": source, "recipe": made, "calibration": calibration.record(), "inputs": names, "fused_ops": fused}
        meta |= {"smoothing": smoothing, **spec}
        calibration.save(tmp / CALIBRATION_FILE)
        (tmp / META_FILE).write_text(json.dumps(meta))
        if onnx_dir.exists():
            shutil.rmtree(onnx_dir)
        os.replace(tmp, onnx_dir)
    except Exception as exc:
        raise OnnxExportError(f"ONNX export to {onnx_dir} failed: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return OnnxExport(onnx_dir / ONNX_FILE, source, made, calibration=calibration.record(), **spec)


def _calibration_feeds(model, names: Sequence[str], texts: Sequence[str], batch_size: int = 8) -> Iterator[dict[str, np.ndarray]]:  # noqa: ANN001
    """Batches of the calibration passages ``texts``, in length order, tokenised as the model's own tokenizer does."""
    texts = sorted(texts, key=len)
    for i in range(0, len(texts), batch_size):
        features = model.tokenizer(texts[i : i + batch_size], padding=True, truncation=True, max_length=model.max_seq_length, return_tensors="np")
        yield {n: features[n].astype(np.int64) if n in features else np.zeros_like(features["input_ids"], dtype=np.int64) for n in names}


def _trace(model, hf, path: Path) -> list[str]:  # noqa: ANN001
    """Trace ``hf`` to ONNX with the eager attention (restored afterwards); returns the input names."""
    import torch

    features = model.tokenizer(["a short question", "a somewhat longer passage of text"], padding=True, return_tensors="pt")
    names = [n for n in INPUTS if n in features]
    previous = hf.config._attn_implementation
    hf.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            torch.onnx.export(
                OneOutput(hf, names),
                tuple(features[n] for n in names),
                str(path),
                input_names=names,
                output_names=["last_hidden_state"],
                opset_version=17,
                dynamo=False,
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
            )
    finally:
        hf.set_attn_implementation(previous)
    return names


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


class OneOutput:
    """Wraps a Hugging Face model so torch.onnx.export sees positional inputs and one named output
    (``last_hidden_state`` of an encoder, ``logits`` of a cross-encoder)."""

    def __new__(cls, hf, names: Sequence[str], output: str = "last_hidden_state"):  # noqa: ANN001, ANN204
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.hf = hf

            def forward(self, *tensors):  # noqa: ANN002, ANN202
                return getattr(self.hf(**dict(zip(names, tensors, strict=False))), output)

        return Wrapper().eval()


def _mean(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    return (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)


def _cls(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return hidden[:, 0]


POOLERS = {"mean": _mean, "cls": _cls}


class OnnxSession:
    """Runs an exported encoder: tokenise, one session run per batch, pool, L2-normalise.

    The session is single-threaded. One batch (a query) runs in the caller's thread: a pool of
    intra-op threads that sleep between requests cost a query more than it saved (faq6 dev
    questions, 2 cores, 10 ms apart: 3.4 ms p50 with two threads, 3.1 ms with one), and concurrent
    requests each get a core. Many batches (passages) run one per core (``threads`` workers) on the
    same session: independent batches keep every core busy where a shared thread pool waits at each
    op for its slowest thread (a loaded machine, a short batch).
    """

    def __init__(self, export: OnnxExport, *, tokenizer: EncoderTokenizer, threads: int | None = None) -> None:
        self.export = export
        self.threads = threads or available_cpus()
        self.session = cpu_session(export.path, 1)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer = tokenizer  # truncates to the export's max_seq_length
        self.dim = export.dim
        self.pool = POOLERS[export.pooling]

    def encode(self, texts: Sequence[str], *, batch_size: int, bar=None) -> np.ndarray:  # noqa: ANN001 - a tqdm bar
        """Unit-length vectors of ``texts``; batches are formed in token-length order (almost no padding)."""
        rows = self.tokenizer.ids(texts)

        def run(idx: np.ndarray) -> np.ndarray:
            return self._run(self._feed([rows[i] for i in idx]))

        return by_length([len(r) for r in rows], batch_size=batch_size, threads=self.threads, dim=self.dim, run=run, name="onnx-encode", bar=bar)

    def _feed(self, rows: list[list[int]]) -> dict[str, np.ndarray]:
        ids, mask = self.tokenizer.pad(rows)
        given = {"input_ids": ids, "attention_mask": mask}
        return {n: given[n] if n in given else np.zeros_like(ids) for n in self.inputs}

    def _run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return unit_rows(self.pool(self.session.run(None, feed)[0], feed["attention_mask"]))


def cpu_session(path: Path, threads: int, *, optimized_copy: Path | None = None):  # noqa: ANN202 - an onnxruntime.InferenceSession
    """A CPU session on ``path`` with :data:`UNFUSED` turned off (``optimized_copy``: also write the graph it runs there)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if optimized_copy is not None:
        options.optimized_model_filepath = str(optimized_copy)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    # Worker threads that spin between ops burn the CPU other processes (and the other batches) need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(UNFUSED))
    except Exception as exc:
        raise OnnxExportError(f"cannot load {path}: {exc}") from exc
