"""Per-channel smoothing of each int8 op's input, chosen on calibration passages (SmoothQuant-style).

Dynamic int8 quantises an op's input with one scale per tensor, so a few outlier channels (MiniLM's
LayerNorm outputs, the Gelu outputs feeding the second feed-forward MatMul) set the step for every
value and the rest lose precision. For any per-channel ``s > 0``, ``X @ W == (X / s) @ (s * W)``: a
``Mul`` by ``1 / s`` before the op and the weight's rows multiplied by ``s`` leave the fp32 function
unchanged and move range from the activations into the (per-column quantised) weights. ``s`` is picked
per op from a small grid by the int8 error it gives on calibration activations, simulated the way ONNX
Runtime quantises (uint8 activations per tensor, int8 weights per output column, reduced range). The
calibration passages (:class:`Calibration`) are a seeded sample of the corpus being indexed
(:func:`corpus_calibration`), or the shipped demo's where no corpus is at hand; the export's recipe names which.
On faq6 (base MiniLM, 256 tokens) this halves the passages' distance from fp32 (docs/speed.md).

Written by hand: neither onnxruntime's quantizer nor optimum smooths activations for dynamic int8.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from service.jsonl import read_objects

#: How many passages calibrate the smoothing: a seeded sample of the corpus being indexed, else the first of the
#: shipped demo's.
CALIBRATION_PASSAGES = 64
#: The seed of the corpus sample (the sample is a function of the corpus' texts, whatever their order).
CALIBRATION_SEED = 0


class CalibrationSource(str, Enum):
    """What the smoothing was calibrated on."""

    CORPUS = "corpus"  # a sample of the passages the export embeds
    DEMO = "demo"  # the shipped demo passages (no corpus at hand; every export before corpus calibration)


@dataclass(frozen=True)
class Calibration:
    """The passages an export's smoothing is calibrated on, and where they came from."""

    source: CalibrationSource
    texts: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        """Identifies the texts (sha256 of them in order, 16 hex digits)."""
        digest = hashlib.sha256()
        for text in self.texts:
            digest.update(text.encode("utf-8") + b"\0")
        return digest.hexdigest()[:16]

    @property
    def term(self) -> str:
        """The calibration's part of an export's recipe: ``demo-calibration`` or
        ``corpus-calibration(<passages>,<fingerprint>)``."""
        if self.source is CalibrationSource.DEMO:
            return "demo-calibration"
        return f"corpus-calibration({len(self.texts)},{self.fingerprint})"

    def record(self) -> dict[str, str | int]:
        """What an export's metadata and an index's manifest record of it (not the texts)."""
        return {"source": self.source.value, "passages": len(self.texts), "fingerprint": self.fingerprint}

    def save(self, path: Path) -> None:
        """Write the texts with their record to ``path`` (JSON), so an export can be made again identically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({**self.record(), "texts": list(self.texts)}), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Calibration | None:
        """The calibration saved at ``path``; None when missing, unreadable or not matching its fingerprint."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found = cls(CalibrationSource(data["source"]), tuple(str(t) for t in data["texts"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if found.fingerprint == data.get("fingerprint") else None


def calibration_texts(n: int = CALIBRATION_PASSAGES) -> list[str]:
    """The first ``n`` passages of the demo knowledge base shipped in the package."""
    from service.demo import DOCS

    return [rec["text"] for (_, rec), _ in zip(read_objects(Path(DOCS)), range(n), strict=False)]


def demo_calibration(n: int = CALIBRATION_PASSAGES) -> Calibration:
    """The first ``n`` shipped demo passages: the calibration where no corpus passages are at hand."""
    return Calibration(CalibrationSource.DEMO, tuple(calibration_texts(n)))


def corpus_calibration(texts: Iterable[str], n: int = CALIBRATION_PASSAGES, *, seed: int = CALIBRATION_SEED) -> Calibration:
    """A seeded sample of ``n`` distinct non-empty passages of a corpus (all of them when fewer): the texts ranked by
    a hash of the seed and the text, so the sample depends on the corpus' texts, not on their order. No passages:
    the demo's (:func:`demo_calibration`)."""
    distinct = {t for t in texts if t.strip()}
    if not distinct:
        return demo_calibration(n)
    ranked = sorted(distinct, key=lambda t: hashlib.sha256(f"{seed}\0{t}".encode()).digest())
    return Calibration(CalibrationSource.CORPUS, tuple(sorted(ranked[:n])))


def int8_op(node, consts: set[str]) -> bool:  # noqa: ANN001 - an onnx.NodeProto
    """Whether the dynamic quantizer makes ``node`` int8: a MatMul with a constant weight, or the fused Attention
    (its input projection). Input 0 is the activation, input 1 the weight."""
    return (node.op_type == "MatMul" and node.input[1] in consts) or node.op_type == "Attention"


def candidate_scales(amax: np.ndarray, wmax: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Per-channel scales to try: none; shrinking only the channels above ``c`` x the median range; SmoothQuant's
    ``amax^a / wmax^(1-a)``."""
    yield "none", np.ones_like(amax)
    med = float(np.median(amax)) or 1.0
    for b in (0.5, 0.7, 1.0):
        for c in (1, 2, 4):
            yield f"outliers(b={b},c={c})", np.maximum(1.0, amax / (c * med)) ** b
    for a in (0.3, 0.5, 0.7):
        yield f"smoothquant(a={a})", np.clip(np.maximum(amax, 1e-5) ** a / np.maximum(wmax, 1e-5) ** (1 - a), 1e-2, 1e2)


def int8_activations(x: np.ndarray) -> np.ndarray:
    """``x`` after ONNX Runtime's DynamicQuantizeLinear (uint8, one scale and zero point, range including 0)."""
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (hi - lo) / 255 or 1.0
    zero = np.round(-lo / scale)
    return ((np.clip(np.round(x / scale) + zero, 0, 255) - zero) * scale).astype(np.float32)


def int8_weights(w: np.ndarray) -> np.ndarray:
    """``w`` after symmetric int8 quantisation per output column with the quantizer's reduced range (7 bits)."""
    scale = np.abs(w).max(axis=0) / 64
    scale[scale == 0] = 1.0
    return (np.clip(np.round(w / scale), -64, 64) * scale).astype(np.float32)


def int8_error(batches: list[np.ndarray], refs: list[np.ndarray], w: np.ndarray, s: np.ndarray) -> float:
    """Relative error of the op's int8 output against its fp32 output ``refs`` (``batch @ w``) when its input is
    divided by ``s`` and ``w``'s rows multiplied by it (each batch quantised on its own, as at run time)."""
    wq = int8_weights(w * s[:, None])
    num = sum(float(np.square(int8_activations(x / s) @ wq - ref).sum()) for x, ref in zip(batches, refs, strict=True))
    den = sum(float(np.square(ref).sum()) for ref in refs)
    return (num / den) ** 0.5 if den else 0.0


def op_inputs(model, feeds: Iterable[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:  # noqa: ANN001
    """The fp32 input of every quantised op, one (tokens x channels) array per calibration batch."""
    import onnx
    import onnxruntime as ort

    consts = {i.name for i in model.graph.initializer}
    names = sorted({n.input[0] for n in model.graph.node if int8_op(n, consts)})
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    found: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feed in feeds:
        for name, value in zip(names, session.run(names, feed), strict=True):
            found[name].append(value.reshape(-1, value.shape[-1]))
    return found


def smooth(model, feeds: Iterable[dict[str, np.ndarray]]) -> dict[str, dict[str, float | str]]:  # noqa: ANN001
    """Smooth ``model`` (an fp32 onnx.ModelProto, changed in place) for dynamic int8 on calibration ``feeds``;
    returns, per op, the scales chosen and the simulated int8 error without and with them."""
    from onnx import helper, numpy_helper

    inputs = op_inputs(model, feeds)
    weights = {i.name: i for i in model.graph.initializer}
    chosen: dict[str, dict[str, float | str]] = {}
    consts, uses = set(weights), Counter(i for n in model.graph.node for i in n.input)
    nodes = []
    for node in model.graph.node:
        if int8_op(node, consts) and uses[node.input[1]] == 1:  # a shared weight would be scaled twice
            x, w = node.input[0], node.input[1]
            batches, weight = inputs[x], numpy_helper.to_array(weights[w]).astype(np.float32)
            amax, refs = np.max([np.abs(b).max(axis=0) for b in batches], axis=0), [b @ weight for b in batches]
            tried = [(int8_error(batches, refs, weight, s), name, s) for name, s in candidate_scales(amax, np.abs(weight).max(axis=1))]
            error, name, s = min(tried, key=lambda t: t[0])
            chosen[node.name or w] = {"scales": name, "error_before": round(tried[0][0], 5), "error": round(error, 5)}
            if name != "none":
                weights[w].CopyFrom(numpy_helper.from_array((weight * s[:, None]).astype(np.float32), w))
                inverse, smoothed = f"{w}_smooth_inv", f"{w}_smoothed_input"
                model.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inverse))
                nodes.append(helper.make_node("Mul", [x, inverse], [smoothed], name=f"{w}_smooth"))
                node.input[0] = smoothed
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return chosen
