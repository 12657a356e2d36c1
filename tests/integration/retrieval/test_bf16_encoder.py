"""Bulk passages in bfloat16 (opt-in): close to fp32, used only in bulk, auto where the CPU has AMX, recorded by the index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.artifacts import Registry
from service.demo import DOCS, QUERIES
from service.retrieval.bf16_encoder import RUNTIME, cpu_flags, has_bf16_matrix_unit
from service.retrieval.encoder import Encoder, EncoderBackend, bulk_bf16
from tests.conftest import FEWLABEL_DOCS
from tests.utils import ingest_calibration, ingested_passages, make_settings, present


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def onnx_dir(fewlabel_onnx_dir: Path) -> Path:
    """The base encoder's ONNX export a first ingest of :data:`~tests.conftest.FEWLABEL_DOCS` (the corpus the index
    tests ingest) makes, so they reuse it: the session's (read it)."""
    return fewlabel_onnx_dir


@pytest.fixture(scope="module")
def bf16_encoder(onnx_dir: Path) -> Encoder:
    """The encoder on that export, passages in bulk in bfloat16."""
    return Encoder(backend="onnx", onnx_dir=onnx_dir, bulk_bf16=True, calibration=ingest_calibration(FEWLABEL_DOCS))


def test_bulk_bf16_passages_are_close_to_fp32_and_rank_as_well(bf16_encoder: Encoder, encoder: Encoder):
    docs = _read(DOCS)[:150]
    ids = {d["doc_id"] for d in docs}
    queries = [q for q in _read(QUERIES) if set(q.get("gold_doc_ids") or []) & ids]
    texts = [d["text"] for d in docs]
    assert bf16_encoder._bf16 is None  # loaded on first bulk use only
    fast_bulk = bf16_encoder.embed_passages(texts, bulk=True)
    assert bf16_encoder._bf16 is not None and bf16_encoder.passage_runtime == RUNTIME
    ref = encoder.embed_passages(texts)
    assert fast_bulk.shape == ref.shape and fast_bulk.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(fast_bulk, axis=1), 1.0, atol=1e-5)
    cos = (fast_bulk * ref).sum(1)
    assert cos.min() > 0.99 and cos.mean() > 0.998, (cos.min(), cos.mean())
    # Outside bulk the passages take the ONNX int8 runtime (another vector, as close to fp32 as int8 is).
    small = bf16_encoder.embed_passages(texts[:20])
    assert not np.allclose(small, fast_bulk[:20], atol=1e-4)
    assert (small * ref[:20]).sum(1).min() > 0.97

    # int8 queries against bf16 passages find the gold passage first as often as fp32 on both sides (within 3 points).
    def top1(q: np.ndarray, d: np.ndarray) -> float:
        best = (q @ d.T).argmax(1)
        return float(np.mean([docs[b]["doc_id"] in set(qq["gold_doc_ids"]) for b, qq in zip(best, queries, strict=True)]))

    q_fast = bf16_encoder.embed_queries([q["query"] for q in queries])
    q_ref = encoder.embed_queries([q["query"] for q in queries])
    assert top1(q_fast, fast_bulk) >= top1(q_ref, ref) - 0.03, (top1(q_fast, fast_bulk), top1(q_ref, ref))


def test_cpu_flags_and_the_auto_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx512f", "amx_bf16", "amx_tile", "amx_int8"}
    assert cpu_flags(tmp_path / "missing") == set()
    assert has_bf16_matrix_unit({"amx_bf16", "amx_tile"}) and not has_bf16_matrix_unit({"avx512f", "avx512_bf16"})

    import service.retrieval.bf16_encoder as bf16

    assert bulk_bf16(make_settings(tmp_path / "home"), "onnx") is False  # off unless asked for
    settings = make_settings(tmp_path / "home", passage_bf16="auto")
    for amx in (True, False):
        monkeypatch.setattr(bf16, "has_bf16_matrix_unit", lambda flags=None, amx=amx: amx)
        assert bulk_bf16(settings, "onnx") is amx
        assert bulk_bf16(settings, "torch") is False  # the fp32 backend stays exact
        assert bulk_bf16(make_settings(tmp_path / "home", passage_bf16="on"), "torch") is True
        assert bulk_bf16(make_settings(tmp_path / "home", passage_bf16="off"), "onnx") is False


@pytest.mark.parametrize(("choice", "runtime"), [("on", RUNTIME), ("off", "onnx")])
def test_index_records_its_passage_runtime_and_serves_its_passages(
    tmp_path: Path, bf16_encoder: Encoder, fewlabel_cache: Path, choice: str, runtime: str
):  # fewlabel_cache: the per-user cache holding the export the ingest needs (bf16_encoder's)
    from indexes.ingest import ingest
    from service.loading import load_pipeline

    settings = make_settings(tmp_path / "home", encoder_backend="onnx", passage_bf16=choice, cache=fewlabel_cache)
    report = ingest([FEWLABEL_DOCS], settings, progress=False)
    manifest = Registry(settings.home_dir).manifest("index", present(report.version))
    assert manifest["passage_runtime"] == runtime and manifest["encoder_backend"] == "onnx"
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        assert pipeline.encoder.backend is EncoderBackend.ONNX
        target = ingested_passages(FEWLABEL_DOCS)[7]
        hit = pipeline.retrieve(target.text, top_k=1, strategy="uis").hits[0]
        assert hit.passage.doc_id == target.doc_id
    finally:
        pipeline.close()


def test_a_bf16_model_that_cannot_load_leaves_bulk_passages_on_the_encoders_runtime(onnx_dir: Path, caplog, monkeypatch):
    import service.retrieval.bf16_encoder as bf16

    def broken(*args, **kwargs):
        raise OSError("no weights")

    monkeypatch.setattr(bf16, "Bf16PassageEncoder", broken)
    enc = Encoder(backend="onnx", onnx_dir=onnx_dir, bulk_bf16=True)
    texts = [d["text"] for d in _read(DOCS)[:10]]
    with caplog.at_level("WARNING", logger="fedqa.encoder"):
        vecs = enc.embed_passages(texts, bulk=True)
    assert "bf16 passage encoder unavailable" in caplog.text
    assert enc.passage_runtime == "onnx" and not enc.bulk_bf16
    np.testing.assert_allclose(vecs, enc.embed_passages(texts), atol=1e-6)


def test_bulk_bf16_on_the_pytorch_backend_uses_its_max_seq_length(encoder: Encoder):
    """'on' with the fp32 PyTorch encoder: the bf16 model truncates as the fp32 one does (and loads without deadlock)."""
    enc = Encoder(backend="torch", bulk_bf16=True)
    texts = [d["text"] for d in _read(DOCS)[:12]]
    vecs = enc.embed_passages(texts, bulk=True)
    assert enc._bf16 is not None and enc._bf16.model.max_seq_length == encoder.max_seq_length
    assert (vecs * encoder.embed_passages(texts)).sum(1).min() > 0.99
