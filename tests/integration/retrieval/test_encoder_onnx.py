"""The ONNX Runtime encoder: vectors close to PyTorch's, exported once and reused, PyTorch fallback, query cache."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from service.artifacts import Registry
from service.demo import DOCS, QUERIES
from service.retrieval.encoder import Encoder, EncoderBackend, QueryCache
from service.retrieval.onnx_encoder import CALIBRATION_FILE, META_FILE, ONNX_FILE, RECIPE, cpu_session, exported, recipe
from service.retrieval.onnx_smoothing import Calibration
from tests.conftest import FEWLABEL_DOCS, make_settings
from tests.utils import ingest_calibration, ingested_passages, present


def _demo() -> tuple[list[dict], list[dict]]:
    """The first 150 demo passages and the demo questions whose gold passages are among them."""
    read = lambda path: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]  # noqa: E731
    docs = read(DOCS)[:150]
    ids = {d["doc_id"] for d in docs}
    return docs, [q for q in read(QUERIES) if set(q.get("gold_doc_ids") or []) & ids]


@pytest.fixture(scope="module")
def demo_corpus() -> Calibration:
    """The sample of the demo's passages a first ingest of the demo calibrates the base model's export on."""
    return ingest_calibration(DOCS)


@pytest.fixture(scope="module")
def onnx_dir(demo_onnx_dir: Path) -> Path:
    """The session's export calibrated on ``demo_corpus`` (tests read it; those that change an export copy it first)."""
    return demo_onnx_dir


@pytest.fixture(scope="module")
def onnx_encoder(onnx_dir: Path, demo_corpus: Calibration) -> Encoder:
    return Encoder(backend="onnx", onnx_dir=onnx_dir, calibration=demo_corpus)


def test_onnx_vectors_are_close_to_pytorch_and_retrieve_as_well(onnx_encoder, encoder):
    assert onnx_encoder.backend is EncoderBackend.ONNX and encoder.backend is EncoderBackend.TORCH
    docs, queries = _demo()
    texts = [d["text"] for d in docs]
    d_fast, d_ref = onnx_encoder.embed_passages(texts), encoder.embed_passages(texts)
    q_fast, q_ref = onnx_encoder.embed_queries([q["query"] for q in queries]), encoder.embed_queries([q["query"] for q in queries])
    assert d_fast.shape == d_ref.shape and d_fast.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(d_fast, axis=1), 1.0, atol=1e-4)
    cos_d, cos_q = (d_fast * d_ref).sum(1), (q_fast * q_ref).sum(1)
    # With the smoothed int8 ops (recipe 4) the demo gave mean 0.998, min 0.996 (unsmoothed: mean 0.995, min 0.99) on
    # the package set of 2026-11-25 morning; a fresh install that evening gives mean 0.9956 (passages) / 0.9973
    # (questions) with the code of that morning too (31738b8), so a dependency moved: see the closing note of that day.
    # Calibrated on the first 64 demo passages (64 of these 150) the passages gave mean 0.9956, min 0.9901 on
    # 2026-11-26; on a seeded sample of the whole demo corpus (this export, as a first ingest of the demo makes it)
    # mean 0.9952, min 0.9893: the calibration no longer sits in the measured passages.
    assert cos_d.min() > 0.985 and cos_q.min() > 0.99, (cos_d.min(), cos_q.min())
    assert cos_d.mean() > 0.995 and cos_q.mean() > 0.996, (cos_d.mean(), cos_q.mean())

    # Top-1 accuracy on the demo questions within 3 points of PyTorch fp32 (faq6 figure: docs/speed.md).
    def top1(q: np.ndarray, d: np.ndarray) -> float:
        best = (q @ d.T).argmax(1)
        return float(np.mean([docs[b]["doc_id"] in set(qq["gold_doc_ids"]) for b, qq in zip(best, queries, strict=True)]))

    assert top1(q_fast, d_fast) >= top1(q_ref, d_ref) - 0.03, (top1(q_fast, d_fast), top1(q_ref, d_ref))
    # Vectors come back in input order (batches are formed by length inside; int8 activation
    # scales are per batch, so a text's vector moves slightly with its batch-mates).
    again = onnx_encoder.embed_passages(texts[:50][::-1])[::-1]
    assert (again * d_fast[:50]).sum(1).min() > 0.98


def test_onnx_queries_get_the_vector_served_alone_whatever_they_are_embedded_with(onnx_dir):
    """int8 activations are quantised per batch: evaluation and fitting embed many queries at once and must see
    the vector /ask gives each question alone."""
    encoder = Encoder(backend="onnx", onnx_dir=onnx_dir, cache_size=0)
    questions = [q["query"] for q in _demo()[1][:12]] + ["a much longer question about exporting every survey result to a spreadsheet"]
    together = encoder.embed_queries(questions)
    alone = np.stack([encoder.embed_query(q) for q in questions])
    assert np.array_equal(together, alone)


def test_export_is_stored_once_and_reused(onnx_encoder, onnx_dir: Path, caplog):
    model_file = onnx_dir / ONNX_FILE
    meta = json.loads((onnx_dir / META_FILE).read_text())
    assert model_file.is_file() and meta["source"]
    before = model_file.stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="fedqa.encoder"):
        again = Encoder(backend="onnx", onnx_dir=onnx_dir)
    assert again.backend is EncoderBackend.ONNX
    assert model_file.stat().st_mtime_ns == before
    assert not any("exported" in r.getMessage() for r in caplog.records)
    # A stored export runs without the PyTorch model: what it needs is stored with it.
    assert again._model is None and (again.dim, again.max_seq_length) == (384, 256)
    np.testing.assert_array_equal(again.embed_query("How do I reset my password?"), onnx_encoder.embed_query("How do I reset my password?"))


def test_export_fuses_attention_and_a_changed_recipe_makes_it_stale(onnx_encoder, onnx_dir: Path, tmp_path: Path, demo_corpus: Calibration):
    meta = json.loads((onnx_dir / META_FILE).read_text())
    # The eager-attention trace is what ONNX Runtime's BERT optimizer fuses (one Attention per layer).
    assert meta["recipe"] == recipe(demo_corpus) and meta["fused_ops"] == {"Attention": 6, "EmbedLayerNormalization": 1}
    # The recipe names the passages the smoothing was calibrated on, the metadata records them, the folder holds them.
    assert f"smoothed-inputs(per-op-grid,corpus-calibration(64,{demo_corpus.fingerprint}))" in meta["recipe"]
    assert meta["calibration"] == demo_corpus.record() == onnx_encoder.calibration
    assert Calibration.load(onnx_dir / CALIBRATION_FILE) == demo_corpus and onnx_encoder.query_runtime == f"onnx:{meta['recipe']}"
    # Every int8 op (6 attention projections, 18 MatMuls) had its input smoothing chosen on calibration passages;
    # where scales were kept they lower the simulated int8 error, and a Mul before the op divides by them.
    smoothing = meta["smoothing"]
    assert len(smoothing) == 24 and sum(c["scales"] != "none" for c in smoothing.values()) >= 12, smoothing
    assert all(c["error"] < c["error_before"] for c in smoothing.values() if c["scales"] != "none")
    import onnx

    muls = [n for n in onnx.load(str(onnx_dir / ONNX_FILE), load_external_data=False).graph.node if n.name.endswith("_smooth")]
    assert len(muls) == sum(c["scales"] != "none" for c in smoothing.values())
    assert exported(onnx_dir, meta["source"]) is not None
    assert exported(onnx_dir, "weights-of-another-model") is None
    assert exported(onnx_dir, meta["source"], calibration=demo_corpus.fingerprint) is not None
    assert exported(onnx_dir, meta["source"], calibration="another-corpus") is None
    # An export from before corpus calibration (the demo's recipe, no record) still loads, as demo-calibrated.
    older = tmp_path / "older"
    shutil.copytree(onnx_dir, older)
    (older / CALIBRATION_FILE).unlink()
    (older / META_FILE).write_text(json.dumps({k: v for k, v in {**meta, "recipe": RECIPE}.items() if k != "calibration"}))
    loaded = Encoder(backend="onnx", onnx_dir=older)
    assert loaded.backend is EncoderBackend.ONNX and loaded._model is None and loaded.calibration == {"source": "demo"}
    assert "demo-calibration" in loaded.query_runtime
    stale = tmp_path / "onnx"
    shutil.copytree(onnx_dir, stale)
    (stale / META_FILE).write_text(json.dumps({**meta, "recipe": "torch.onnx(opset17)+ort-bert-optimizer+dynamic-int8/1"}))
    assert exported(stale, meta["source"]) is None


def test_sessions_run_layer_norm_and_gelu_unfused(onnx_encoder, onnx_dir: Path, tmp_path: Path):
    """ONNX Runtime's SkipLayerNormalization and BiasGelu CPU kernels are slower than the ops they fuse: neither the
    export nor the graph a session runs holds them (the runtime would fuse them again at load unless told not to)."""
    import onnx

    ran = tmp_path / "optimized.onnx"
    cpu_session(onnx_dir / ONNX_FILE, 1, optimized_copy=ran)
    for path in (onnx_dir / ONNX_FILE, ran):
        ops = {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}
        assert not ops & {"SkipLayerNormalization", "BiasGelu"}, (path.name, ops)
        assert {"LayerNormalization", "Gelu", "QAttention"} <= ops, (path.name, ops)


def test_an_export_of_an_older_recipe_is_made_again(onnx_dir: Path, tmp_path: Path, caplog, demo_corpus: Calibration, monkeypatch):
    """A stored export of an older recipe is made again, on the passages stored with it. The export's costly steps
    (fusion, smoothing, int8: 30-70 s on 2 cores, run for real by the session's export) return here what they returned
    there for the same passages, so this test pays only for the trace and checks what the new export is made on."""
    import service.retrieval.onnx_encoder as onnx_mod

    stale = tmp_path / "onnx"
    shutil.copytree(onnx_dir, stale)
    meta = json.loads((stale / META_FILE).read_text())
    (stale / META_FILE).write_text(json.dumps({**meta, "recipe": "torch.onnx(opset17)+ort-bert-optimizer+dynamic-int8/1"}))
    calibrated_on: list[int] = []

    def as_the_session_export(fp32: Path, out: Path, config, feeds) -> tuple[dict[str, int], dict]:  # noqa: ANN001
        assert fp32.is_file() and config.num_attention_heads == 12  # a real trace of the base model
        calibrated_on.append(sum(len(batch["input_ids"]) for batch in feeds))
        shutil.copyfile(onnx_dir / ONNX_FILE, out)
        fp32.unlink()
        return meta["fused_ops"], meta["smoothing"]

    monkeypatch.setattr(onnx_mod, "optimize_smooth_quantize", as_the_session_export)
    with caplog.at_level(logging.INFO, logger="fedqa.encoder"):
        enc = Encoder(backend="onnx", onnx_dir=stale)
    assert enc.backend is EncoderBackend.ONNX
    assert any("exported" in r.getMessage() for r in caplog.records)
    # Made again on the passages stored with the stale export, so its vectors stay those of the same corpus.
    assert calibrated_on == [len(demo_corpus.texts)]
    assert json.loads((stale / META_FILE).read_text())["recipe"] == recipe(demo_corpus)
    assert Calibration.load(stale / CALIBRATION_FILE) == demo_corpus and not (stale / "fp32.onnx").exists()


def test_an_earlier_recipes_export_serves_when_the_home_cannot_take_a_new_one(onnx_encoder, onnx_dir: Path, tmp_path: Path, monkeypatch, caplog):
    """After an upgrade that changes the recipe, a read-only home keeps serving its stored export (slower, same model)."""
    import service.retrieval.onnx_encoder as onnx_mod

    stale = tmp_path / "onnx"
    shutil.copytree(onnx_dir, stale)
    meta = json.loads((stale / META_FILE).read_text())
    (stale / META_FILE).write_text(json.dumps({**meta, "recipe": "an-earlier-recipe/2"}))

    def read_only(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError("Read-only file system")

    monkeypatch.setattr(onnx_mod, "export_onnx", read_only)
    with caplog.at_level(logging.WARNING, logger="fedqa.encoder"):
        enc = Encoder(backend="onnx", onnx_dir=stale)
    assert enc.backend is EncoderBackend.ONNX and enc.backend_error is None
    assert any("earlier recipe (an-earlier-recipe/2)" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(enc.embed_query("refund an invoice"), onnx_encoder.embed_query("refund an invoice"))
    # Without a stored export of any recipe, the failure still falls back to PyTorch.
    with caplog.at_level(logging.WARNING, logger="fedqa.encoder"):
        none = Encoder(backend="onnx", onnx_dir=tmp_path / "empty" / "onnx")
    assert none.backend is EncoderBackend.TORCH and "Read-only" in (none.backend_error or "")


def test_failed_export_falls_back_to_pytorch_with_a_warning(tmp_path: Path, encoder, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the export folder's parent should be")
    with caplog.at_level(logging.WARNING, logger="fedqa.encoder"):
        enc = Encoder(backend="onnx", onnx_dir=blocker / "onnx")
    assert enc.backend is EncoderBackend.TORCH and enc.backend_error
    assert any("falling back to PyTorch" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(enc.embed_query("refund an invoice"), encoder.embed_query("refund an invoice"), atol=1e-5)


def test_query_cache_returns_the_same_vector_and_evicts_least_recent(onnx_dir: Path):
    enc = Encoder(backend="onnx", onnx_dir=onnx_dir, cache_size=2)
    first = enc.embed_query("how do I merge contacts")
    assert (enc.cache.hits, enc.cache.misses) == (0, 1)
    np.testing.assert_array_equal(enc.embed_query("how do I merge contacts"), first)
    assert enc.cache.hits == 1
    batch = enc.embed_queries(["refunds", "how do I merge contacts", "refunds"])
    np.testing.assert_array_equal(batch[1], first)
    np.testing.assert_array_equal(batch[0], batch[2])
    enc.embed_query("a third question")  # evicts the least recently used ("how do I merge contacts" was used last but one)
    assert len(enc.cache) == 2
    hits = enc.cache.hits
    enc.embed_query("how do I merge contacts")
    assert enc.cache.hits == hits  # evicted: computed again


def test_query_cache_off_and_lru_order():
    off = QueryCache(0)
    off.put("q", np.ones(3, dtype=np.float32))
    assert off.get("q") is None and len(off) == 0
    cache = QueryCache(2)
    for key in ("a", "b"):
        cache.put(key, np.full(3, ord(key), dtype=np.float32))
    assert cache.get("a") is not None  # "b" is now least recent
    cache.put("c", np.zeros(3, dtype=np.float32))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    cached = present(cache.get("a"))
    with pytest.raises(ValueError):
        cached[0] = 1.0  # cached vectors are read-only


def test_index_records_its_backend_and_queries_follow_it(tmp_path: Path, onnx_dir: Path, monkeypatch, demo_corpus: Calibration):
    from indexes.ingest import IngestMode, ingest
    from service.loading import load_pipeline

    settings = make_settings(tmp_path / "home", encoder_backend="onnx")
    # The base model's export lives in the per-user cache (in the home for tests), one per calibration: a first ingest
    # calibrates it on a sample of its passages. The module's export is that one: reused for speed.
    from service.retrieval.encoder import base_onnx_dir, calibration_file, packaged_minilm_path

    cache = base_onnx_dir(settings, packaged_minilm_path(), demo_corpus.fingerprint)
    cache.parent.mkdir(parents=True)
    shutil.copytree(onnx_dir, cache)
    report = ingest([DOCS], settings, progress=False)
    manifest = Registry(settings.home_dir).manifest("index", present(report.version))
    assert manifest["encoder_backend"] == "onnx" and manifest["encoder_calibration"] == demo_corpus.record()
    assert Calibration.load(calibration_file(settings, demo_corpus.fingerprint)) == demo_corpus  # kept by the home
    assert not base_onnx_dir(settings, packaged_minilm_path()).exists()  # no demo-calibrated export was made
    # A server configured for PyTorch still embeds queries as this index's passages were, with the same export.
    pipeline = load_pipeline(make_settings(settings.home_dir, encoder_backend="torch"), with_llm=False)
    try:
        assert pipeline.encoder.backend is EncoderBackend.ONNX and pipeline.encoder.calibration == demo_corpus.record()
        assert not pipeline.warnings or all("embedded with" not in w for w in pipeline.warnings)
    finally:
        pipeline.close()
    # Re-ingesting unchanged input costs nothing; a new product costs only its passages.
    again = ingest([DOCS], settings, progress=False)
    assert not again.changed and again.added == 0
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"doc_id": "newprod/1", "domain": "newprod", "title": "New", "text": "The new product ships monthly."}) + "\n")
    added = ingest([extra], settings, progress=False, mode=IngestMode.ADD)
    assert added.changed and added.added == 1 and added.unchanged == 0
    added_manifest = Registry(settings.home_dir).manifest("index", present(added.version))
    assert added_manifest["encoder_backend"] == "onnx" and added_manifest["encoder_calibration"] == demo_corpus.record()


def test_an_index_finds_the_export_it_was_embedded_with(tmp_path: Path, demo_corpus: Calibration, caplog):
    """Where the base model's export of an index lies, and what it is made on when missing (no export run here)."""
    from service.retrieval.encoder import _base_export, base_onnx_dir, calibration_file, packaged_minilm_path

    settings, model = make_settings(tmp_path / "home"), packaged_minilm_path()
    demo_dir, corpus_dir = base_onnx_dir(settings, model), base_onnx_dir(settings, model, demo_corpus.fingerprint)
    # A new vector space: its corpus sample is saved in the home, the export keyed by the sample's fingerprint.
    assert _base_export(settings, model, demo_corpus) == (corpus_dir, demo_corpus) and corpus_dir != demo_dir
    assert Calibration.load(calibration_file(settings, demo_corpus.fingerprint)) == demo_corpus
    # What an index recorded: the same folder, and the passages to make that export again if the cache lost it.
    assert _base_export(settings, model, demo_corpus.record()) == (corpus_dir, demo_corpus)
    # Indexes from before the record, or embedded with a demo-calibrated export: the demo's folder.
    assert _base_export(settings, model, None) == _base_export(settings, model, {"source": "demo"}) == (demo_dir, None)
    # Neither the export nor its passages: the demo's, with a warning.
    calibration_file(settings, demo_corpus.fingerprint).unlink()
    with caplog.at_level(logging.WARNING, logger="fedqa.encoder"):
        assert _base_export(settings, model, demo_corpus.record()) == (demo_dir, None)
    assert any("are gone" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_another_corpus_calibrates_its_own_smoothing_and_stays_close_to_fp32(onnx_encoder, onnx_dir: Path, encoder, fewlabel_onnx_dir: Path):
    """The smoothing factors come from the corpus' own passages: another corpus (six Markdown pages) chooses others,
    and its int8 vectors stay close to PyTorch fp32's on it."""
    import onnx
    from onnx import numpy_helper

    texts = [p.text for p in ingested_passages(FEWLABEL_DOCS)]
    calibration = ingest_calibration(FEWLABEL_DOCS)
    enc = Encoder(backend="onnx", onnx_dir=fewlabel_onnx_dir, calibration=calibration)
    meta, demo_meta = (json.loads((d / META_FILE).read_text()) for d in (fewlabel_onnx_dir, onnx_dir))
    assert enc.backend is EncoderBackend.ONNX and meta["recipe"] == recipe(calibration) != demo_meta["recipe"]
    assert meta["calibration"] == calibration.record() != demo_meta["calibration"]

    def inverses(path: Path) -> dict[str, np.ndarray]:
        graph = onnx.load(str(path / ONNX_FILE)).graph
        return {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.name.endswith("_smooth_inv")}

    mine, demo = inverses(fewlabel_onnx_dir), inverses(onnx_dir)
    assert mine and any(n not in demo or not np.allclose(mine[n], demo[n]) for n in mine), "the same factors as the demo's"
    fast, ref, other = enc.embed_passages(texts), encoder.embed_passages(texts), onnx_encoder.embed_passages(texts)
    cos, cos_other = (fast * ref).sum(1), (other * ref).sum(1)
    # 2026-11-30, its 17 passages: mean 0.9988, min 0.9983 (the demo-calibrated export: 0.9982, 0.9976); faq6's 120 sample
    # (2026-11-26, an export of ~50 s): 0.9957, 0.9893 (0.9957, 0.9907). The bounds are the demo's.
    figures = (cos.mean(), cos.min(), cos_other.mean(), cos_other.min())
    assert cos.mean() > 0.995 and cos.min() > 0.985, figures
    assert cos.mean() > cos_other.mean() - 0.001, figures  # not worse than the demo-calibrated export on this corpus


def test_a_new_home_loads_the_per_user_export_and_exports_nothing(tmp_path: Path, onnx_encoder, onnx_dir: Path, monkeypatch):
    """Issue 29, item 9: the base encoder's ONNX export lives in the per-user cache (FEDQA_CACHE, else
    $XDG_CACHE_HOME/fedqa), keyed by model and recipe, so a second home loads the first one's export as it is
    (31738b8 kept it in each home's cache/ and exported again, 40-70 s, for every new home)."""
    from service.config import Settings
    from service.retrieval import onnx_encoder as onnx_module
    from service.retrieval.encoder import base_onnx_dir, load_encoder, packaged_minilm_path

    model = packaged_minilm_path()
    cache = tmp_path / "user-cache"
    first, second = (make_settings(tmp_path / name, encoder_backend="onnx", cache=cache) for name in ("first", "second"))
    shared = base_onnx_dir(first, model)
    assert shared == base_onnx_dir(second, model) and shared.is_relative_to(cache)
    shared.parent.mkdir(parents=True)
    shutil.copytree(onnx_dir, shared)  # what the first home's ingest exported
    files = {p.name: p.stat().st_mtime_ns for p in shared.iterdir()}

    loaded = load_encoder(second, Registry(second.home_dir), None)
    assert loaded.backend is EncoderBackend.ONNX
    question = ["How do I export contacts?"]
    np.testing.assert_allclose(loaded.embed_queries(question), onnx_encoder.embed_queries(question), atol=1e-6)
    assert {p.name: p.stat().st_mtime_ns for p in shared.iterdir()} == files  # loaded as it was, not exported again
    assert [p.name for p in (cache / "onnx").iterdir()] == [shared.name]  # nothing exported beside it
    assert not [p for p in tmp_path.glob("second/**/*.onnx")]  # and nothing in the home

    # Another export recipe gets a folder of its own; the cache's default place is the user's, not a home's.
    monkeypatch.setattr(onnx_module, "RECIPE", RECIPE + "-changed")
    assert base_onnx_dir(second, model) != shared and base_onnx_dir(second, model).parent == shared.parent
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Settings(home=tmp_path / "third").cache_dir == tmp_path / "xdg" / "fedqa"


def test_json_log_of_the_server_gets_no_progress_bars(onnx_encoder, onnx_dir: Path):
    """What `fedqa serve` does at start (JSON logging, then models loaded) writes only JSON lines."""
    import subprocess
    import sys

    code = (
        "import sys, warnings\n"
        "from pathlib import Path\n"
        "from service.logs import configure_logging\n"
        "configure_logging('json', 'INFO')\n"
        "from service.retrieval.encoder import Encoder\n"
        "from tqdm.auto import tqdm\n"
        "enc = Encoder(backend='onnx', onnx_dir=Path(sys.argv[1]))\n"
        "enc.embed_passages(['one passage', 'another passage'])\n"
        "list(tqdm(range(3), desc='a default bar'))\n"
        "warnings.warn('a library warning')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(onnx_dir)], capture_output=True, text=True, timeout=300, check=True)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines, "expected at least the warning as a JSON record"
    records = [json.loads(line) for line in lines]  # raises on a progress bar or a bare warning
    assert any("a library warning" in r["message"] for r in records)


def test_router_training_vectors_are_the_served_ones_and_are_cached(onnx_dir: Path, tmp_path: Path):
    """The router head is trained on the vectors /ask gives each question (int8 activations are quantised per batch)."""
    from training.router_data import embed_cached

    encoder = Encoder(backend="onnx", onnx_dir=onnx_dir, cache_size=0)
    questions = [q["query"] for q in _demo()[1][:20]]
    vectors = embed_cached(encoder, questions, tmp_path / "cache")
    assert np.array_equal(vectors, np.stack([encoder.embed_query(q) for q in questions]))
    assert not np.array_equal(vectors, encoder.embed_passages(questions, batch_size=20))  # batched: other vectors
    (cached,) = (tmp_path / "cache").glob("*.npy")
    np.save(cached, np.zeros_like(vectors))  # a second call reads the file instead of embedding again
    assert not embed_cached(encoder, questions, tmp_path / "cache").any()
    # An export of another recipe gives other vectors: it does not read the file cached for this one.
    older = Encoder(backend="onnx", onnx_dir=onnx_dir, cache_size=0)
    assert older._onnx is not None
    older._onnx.export = dataclasses.replace(older._onnx.export, recipe="an earlier recipe")
    assert older.query_runtime != encoder.query_runtime and embed_cached(older, questions, tmp_path / "cache").any()
