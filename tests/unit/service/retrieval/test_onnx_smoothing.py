"""Smoothing before dynamic int8: the fp32 function is kept, the int8 error on outlier channels falls."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from service.demo import DOCS
from service.jsonl import read_objects
from service.retrieval.onnx_smoothing import (
    CALIBRATION_PASSAGES,
    Calibration,
    CalibrationSource,
    calibration_texts,
    corpus_calibration,
    int8_activations,
    smooth,
)


def _matmul_model(weights: dict[str, np.ndarray], uses: list[str]) -> onnx.ModelProto:
    """x (rows x 16) -> MatMul with each weight named in ``uses`` -> one output per use."""
    nodes = [helper.make_node("MatMul", ["x", w], [f"y{i}"], name=f"mm{i}") for i, w in enumerate(uses)]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(len(uses))],
        [numpy_helper.from_array(w, name) for name, w in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _outlier_batches(rng: np.random.Generator, n: int = 4) -> list[np.ndarray]:
    """Activations where two of 16 channels are 40x the others (as MiniLM's LayerNorm outputs are)."""
    batches = []
    for _ in range(n):
        x = rng.normal(size=(64, 16)).astype(np.float32)
        x[:, [3, 11]] *= 40
        batches.append(x)
    return batches


def _run(model: onnx.ModelProto | Path, x: np.ndarray) -> np.ndarray:
    data = model if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(str(data) if isinstance(data, Path) else data, providers=["CPUExecutionProvider"]).run(["y0"], {"x": x})[0]


def test_smoothing_keeps_the_fp32_function_and_lowers_the_real_int8_error(tmp_path: Path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.1, size=(16, 8)).astype(np.float32)
    plain, smoothed = _matmul_model({"w": w}, ["w"]), _matmul_model({"w": w}, ["w"])
    calibration = _outlier_batches(rng)
    chosen = smooth(smoothed, [{"x": x} for x in calibration])

    assert chosen["mm0"]["scales"] != "none" and float(chosen["mm0"]["error"]) < float(chosen["mm0"]["error_before"])
    assert [n.op_type for n in smoothed.graph.node] == ["Mul", "MatMul"]
    x = _outlier_batches(rng, 1)[0]  # not a calibration batch
    np.testing.assert_allclose(_run(smoothed, x), _run(plain, x), rtol=1e-4, atol=1e-4)

    errors = {}
    for name, model in (("plain", plain), ("smoothed", smoothed)):
        onnx.save(model, tmp_path / f"{name}.onnx")
        quantize_dynamic(tmp_path / f"{name}.onnx", tmp_path / f"{name}.q.onnx", weight_type=QuantType.QInt8, per_channel=True)
        ref = x @ w
        errors[name] = np.linalg.norm(_run(tmp_path / f"{name}.q.onnx", x) - ref) / np.linalg.norm(ref)
    assert errors["smoothed"] < 0.5 * errors["plain"], errors


def test_a_weight_shared_by_two_ops_is_left_alone():
    rng = np.random.default_rng(1)
    w = rng.normal(scale=0.1, size=(16, 8)).astype(np.float32)
    model = _matmul_model({"w": w}, ["w", "w"])
    chosen = smooth(model, [{"x": x} for x in _outlier_batches(rng)])
    assert chosen == {} and [n.op_type for n in model.graph.node] == ["MatMul", "MatMul"]
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), w)


def test_simulated_activation_quantisation_matches_the_uint8_grid():
    grid = np.array([-85, 0, 40, 170], dtype=np.float32) / 255  # range 1, zero point 85: every value on the grid
    np.testing.assert_allclose(int8_activations(grid), grid, atol=1e-6)
    x = np.random.default_rng(2).normal(size=1000).astype(np.float32)
    step = (x.max() - x.min()) / 255
    assert np.abs(int8_activations(x) - x).max() <= step / 2 + 1e-6
    assert np.abs(int8_activations(x) - x).max() > step / 4  # it does quantise


def test_without_corpus_passages_the_calibration_is_the_shipped_demo_passages():
    texts = calibration_texts(8)
    assert len(texts) == 8 and all(isinstance(t, str) and len(t) > 40 for t in texts)
    demo = corpus_calibration(["", "  "])  # no passage to sample
    assert demo.source is CalibrationSource.DEMO and list(demo.texts) == calibration_texts()
    assert demo.term == "demo-calibration" and demo.record()["source"] == "demo"


def test_corpus_calibration_is_a_seeded_sample_of_the_corpus_whatever_its_order(faq6_sample: list[dict], tmp_path: Path):
    demo = [rec["text"] for _, rec in read_objects(Path(DOCS))]
    first = corpus_calibration(demo)
    assert first.source is CalibrationSource.CORPUS and len(first.texts) == CALIBRATION_PASSAGES
    assert set(first.texts) <= set(demo) and list(first.texts) != demo[:CALIBRATION_PASSAGES]  # spread, not the head
    assert corpus_calibration(demo[::-1]) == first and corpus_calibration(demo + demo[:10]) == first  # order, repeats
    assert corpus_calibration(demo, seed=1).fingerprint != first.fingerprint
    # The recipe's term and the record name the corpus, the sample's size and its fingerprint.
    assert first.term == f"corpus-calibration({CALIBRATION_PASSAGES},{first.fingerprint})"
    assert first.record() == {"source": "corpus", "passages": CALIBRATION_PASSAGES, "fingerprint": first.fingerprint}
    # Another corpus, another sample; a small corpus is taken whole.
    other = corpus_calibration(r["text"] for r in faq6_sample)
    assert other.fingerprint != first.fingerprint and set(other.texts) <= {r["text"] for r in faq6_sample}
    assert len(corpus_calibration(demo[:5]).texts) == 5
    # Saved with the export (and in the home), read back only while its texts match its fingerprint.
    first.save(tmp_path / "calibration.json")
    assert Calibration.load(tmp_path / "calibration.json") == first
    stored = json.loads((tmp_path / "calibration.json").read_text())
    (tmp_path / "calibration.json").write_text(json.dumps({**stored, "texts": stored["texts"][1:]}))
    assert Calibration.load(tmp_path / "calibration.json") is None and Calibration.load(tmp_path / "missing.json") is None
