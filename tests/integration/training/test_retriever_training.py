"""Retriever fine-tuning on a tiny training set: a version with metrics, checkpoints and resume."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from service.artifacts import Registry
from service.demo import DOCS, QUERIES
from service.queries import load_queries
from service.retrieval.encoder import packaged_minilm_path
from tests.conftest import make_settings
from tests.utils import present
from training.checkpoint import StopFlag, TrainingInterrupted
from training.data.build import DataConfig, build_training_data
from training.data.corpus import load_corpus
from training.data.dataset import TrainingData
from training.data.synthetic import HeuristicQueryGenerator
from training.retriever import RetrieverConfig, select_examples, sentence_transformer, train_and_save, train_retriever

TINY = RetrieverConfig(epochs=1, batch_size=4, max_seq_length=48, max_examples=12, labelled_repeat=1, checkpoint_every=0)


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory) -> TrainingData:
    """A training set from the demo corpus and a ninth of its questions (30% held out), a few synthetic queries."""
    out = tmp_path_factory.mktemp("data") / "demo"
    settings = make_settings(tmp_path_factory.mktemp("unused-home"))
    build_training_data(
        load_corpus([DOCS], settings),
        load_queries(QUERIES)[::9],
        out,
        generators=[HeuristicQueryGenerator()],
        config=DataConfig(synthetic_per_domain=4, negatives=2, cross_examples=4, pool_random=20, pool_negatives=2),
        progress=False,
    )
    return TrainingData.load(out)


def test_select_examples_puts_expert_questions_first_and_caps_the_synthetic_ones(demo_data):
    expert = [r for r in demo_data.retriever_rows if r.origin != "synthetic"]
    cfg = RetrieverConfig(max_examples=2 * len(expert) + 8, labelled_repeat=2)
    picked = select_examples(demo_data.retriever_rows, cfg)
    assert picked[: 2 * len(expert)] == [r for r in expert for _ in range(2)]
    synthetic = picked[2 * len(expert) :]
    assert len(synthetic) == 8 and all(r.origin == "synthetic" for r in synthetic)
    assert len({r.domains[0] for r in synthetic}) == 4  # balanced over the demo's four products
    assert len(select_examples(demo_data.retriever_rows, RetrieverConfig(max_examples=1, labelled_repeat=1))) == len(expert)


@pytest.mark.slow
def test_train_and_save_makes_a_retriever_version_with_base_and_fine_tuned_metrics(tmp_path, demo_data):
    settings = make_settings(tmp_path / "home")
    version, metrics = train_and_save(settings, demo_data, config=TINY, progress=False)
    registry = Registry(settings.home_dir)
    assert registry.active()["retriever"] == version
    manifest = registry.manifest("retriever", version)
    assert manifest["data_fingerprint"] == demo_data.fingerprint and manifest["base_model"]
    assert manifest["loss"]["loss"] == "symmetric_infonce" and manifest["loss"]["temperature"] == 0.05
    for which in ("base", "fine_tuned"):
        assert {"acc@1", "recall@5", "recall@10", "mrr"} <= set(metrics[which])
        assert metrics[which]["queries"] == len([q for q in demo_data.val if q.gold_doc_ids])
    saved = json.loads((registry.path("retriever", version) / "metrics.json").read_text())
    assert saved["fine_tuned"] == metrics["fine_tuned"]
    # The version folder is a sentence-transformers model the service's encoder loads.
    from service.retrieval.encoder import Encoder

    enc = Encoder(registry.path("retriever", version), version=version)
    assert enc.embed_query("refund").shape == (enc.dim,)
    # Its ONNX int8 export was stored beside it at the end of training and is used as it is.
    export = registry.path("retriever", version) / "onnx" / "model_qint8.onnx"
    assert export.is_file()
    before = export.stat().st_mtime_ns
    fast = Encoder(registry.path("retriever", version), version=version, backend="onnx")
    assert fast.backend.value == "onnx" and export.stat().st_mtime_ns == before
    # Its int8 smoothing was calibrated on a sample of the training corpus (the passages the version will embed).
    from service.retrieval.onnx_smoothing import corpus_calibration

    calibrated = corpus_calibration(p.text for p in demo_data.passages.values())
    assert fast.calibration == calibrated.record() and calibrated.term in fast.query_runtime
    assert float(fast.embed_query("refund") @ enc.embed_query("refund")) > 0.97


@pytest.mark.slow
def test_interrupted_retriever_training_keeps_a_checkpoint_and_resumes(tmp_path, demo_data, caplog):
    """A stop request ends training after the current step with the trainer's ``checkpoint-<step>``; a new run first
    removes an earlier run's checkpoints (the old loop's ``last`` too); --resume ends where an uninterrupted run does."""
    examples = select_examples(demo_data.retriever_rows, TINY)
    old_loop = tmp_path / "ckpt" / "last"
    (old_loop / "model").mkdir(parents=True)
    (old_loop / "trainer_state.json").write_text('{"global_step": 3}')
    with pytest.raises(ValueError, match="earlier training loop"):
        train_retriever(examples, demo_data.passages, config=TINY, progress=False, resume=old_loop)
    (tmp_path / "ckpt" / "checkpoint-99").mkdir()
    stop = StopFlag()
    stop.request()  # Ctrl-C arrived during the first step
    with caplog.at_level(logging.INFO, logger="fedqa.training"), pytest.raises(TrainingInterrupted) as info:
        train_retriever(examples, demo_data.passages, config=TINY, progress=False, stop=stop, checkpoint_dir=tmp_path / "ckpt")
    checkpoint = present(info.value.checkpoint)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint-1"]
    assert f"removing the earlier run's checkpoint {old_loop}" in caplog.text
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 1
    assert (checkpoint / "modules.json").is_file() and (checkpoint / "optimizer.pt").is_file()
    model = train_retriever(examples, demo_data.passages, config=TINY, progress=False, resume=checkpoint)
    # Resumed training ends where an uninterrupted run with the same seed ends (weights, optimizer, schedule
    # and the dropout RNG all continue), and training moved the model away from where it started.
    whole = train_retriever(examples, demo_data.passages, config=TINY, progress=False)
    probe = ["refund a payment", "import contacts from a spreadsheet", "create a survey"]
    resumed_vecs, whole_vecs = model.encode(probe), whole.encode(probe)
    assert resumed_vecs.shape == (3, 384)
    assert np.allclose(resumed_vecs, whole_vecs, atol=1e-5)
    base = SentenceTransformer(str(packaged_minilm_path()), device="cpu", local_files_only=True)
    assert not np.allclose(base.encode(probe), whole_vecs, atol=1e-3)
    # --resume reads the checkpoint's optimizer as tensors and plain values only: a crafted file does not run.
    marker = tmp_path / "ran"
    torch.save({"state": {}, "param_groups": [], "payload": _Payload(marker)}, checkpoint / "optimizer.pt")
    with pytest.raises(Exception, match="(?i)weights_only|unpickl"):
        train_retriever(examples, demo_data.passages, config=TINY, progress=False, resume=checkpoint)
    assert not marker.exists()


class _Payload:
    """Pickles as a call that creates ``marker``: what a crafted checkpoint would run on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, int]]:
        return (os.open, (str(self.marker), os.O_CREAT | os.O_WRONLY))


def test_without_dropout_a_model_in_training_encodes_the_same_text_the_same_way_twice():
    """``dropout=False`` loads the MiniLM without dropout, so a training step's forward pass is the served one
    (and cheaper on the CPU); with it, two passes over the same text differ."""
    texts = ["How do I refund a payment?"]
    for dropout in (False, True):
        model = sentence_transformer(packaged_minilm_path(), replace(TINY, dropout=dropout))
        model.train()
        features = model.preprocess(texts)
        with torch.no_grad():
            first, second = (model(dict(features))["sentence_embedding"] for _ in range(2))
        assert torch.allclose(first, second, atol=1e-6) is not dropout
