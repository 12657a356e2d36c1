"""``fedqa train reranker``: questions with their served rankings -> a trained cross-encoder -> a reranker version.

The version folder holds the cross-encoder (``model/``), its ONNX int8 export calibrated on this corpus's
(question, passage) pairs (``onnx/``), the fitted combination and calibration (``rerank.json``, fitted on the
validation questions with the logits of the runtime that serves them) and ``metrics.json``. Its manifest
records the index and retriever whose rankings it was trained on, the domains and the training data's
fingerprint: the service uses it only on an index embedded with that retriever over the same domains.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from service.artifacts import Bundle, Registry
from service.config import Settings
from service.reranking.model import MODEL_DIR, ONNX_DIR, Reranker
from service.reranking.params import PARAMS_FILE, RerankParams
from service.retrieval.store import Store
from training.checkpoint import StopFlag
from training.data.dataset import TrainingData
from training.precision import resolve
from training.reranker import RerankerConfig, train_reranker
from training.reranker_data import Candidates, out_of_scope_questions, training_questions, with_candidates
from training.reranker_fit import fit_calibration, fit_combination, fitted_params
from training.versions import save_version

log = logging.getLogger("fedqa.training.reranker")

CALIBRATION_PAIRS = 64


def _candidates(
    settings: Settings, data: TrainingData, cfg: RerankerConfig, bundle: Bundle | None = None, store: Store | None = None
) -> tuple[list[Candidates], list[Candidates], list[Candidates], dict]:
    """Training (in-scope, out-of-scope) and validation questions with the rankings of ``bundle`` (default: the
    active versions; ``store``: its index version, already open)."""
    from service.loading import load_pipeline

    pipeline = load_pipeline(settings, with_llm=False, bundle=bundle, store=store)
    try:
        train_q, origins = training_questions(data, labelled_repeat=cfg.labelled_repeat, limit=cfg.max_questions, seed=cfg.seed)
        oos_q = out_of_scope_questions(data)
        in_scope = with_candidates(pipeline, train_q, origins, depth=cfg.depth, passages=data.passages, titles=cfg.titles)
        oos = with_candidates(pipeline, oos_q, ["out-of-scope"] * len(oos_q), depth=cfg.negatives + 1, passages=None, titles=cfg.titles)
        val_q = [q for q in data.val if q.gold_doc_ids and not q.is_cross]
        val = with_candidates(pipeline, val_q, ["labelled"] * len(val_q), depth=max(cfg.depth, 30), passages=None, titles=cfg.titles)
        versions = dict(pipeline.versions, domains=list(pipeline.domains))
    finally:
        pipeline.close(close_store=store is None)
    return in_scope, oos, val, versions


def train_and_save(
    settings: Settings,
    data: TrainingData,
    *,
    config: RerankerConfig | None = None,
    base_model: str | None = None,
    activate: bool = True,
    progress: bool = True,
    stop: StopFlag | None = None,
    resume: Path | None = None,
    bundle: Bundle | None = None,
    store: Store | None = None,
) -> tuple[str, dict[str, Any]]:
    """Train on the training set's questions against the active index (``bundle``: these versions; ``store``: its
    index version, already open), fit the combination on its validation questions, save (and activate) a reranker
    version; returns (version, metrics)."""
    t0 = time.perf_counter()
    cfg = config or RerankerConfig()
    in_scope, oos, val, versions = _candidates(settings, data, cfg, bundle, store)
    metrics: dict[str, Any] = {
        "train_questions": dict(Counter(c.origin for c in in_scope)),
        "out_of_scope_questions": len(oos),
        "validation_questions": len(val),
        "gold_in_ranking": float(np.mean([any(c.gold[: cfg.depth]) for c in val])) if val else None,
        "candidates_seconds": round(time.perf_counter() - t0, 1),
    }
    t_train = time.perf_counter()
    checkpoints = settings.home_dir / "checkpoints" / "reranker"
    model = train_reranker(in_scope, oos, config=cfg, base_model=base_model, progress=progress, stop=stop, checkpoint_dir=checkpoints, resume=resume)
    metrics["train_seconds"] = round(time.perf_counter() - t_train, 1)
    metrics["precision"] = resolve(cfg.precision).value

    def write(path: Path) -> None:
        model.save(str(path / MODEL_DIR))
        _export(path, val + in_scope, cfg)
        reranker = Reranker(path, path.name, RerankParams(weight=0.0, depth=cfg.depth, max_length=cfg.max_length, titles=cfg.titles))
        ces = [reranker.logits(c.query, c.texts) for c in val]
        fit = fit_combination(val, ces, max_depth=max(cfg.depth, 30), seed=cfg.seed)
        params = fitted_params(fit, fit_calibration(val, ces), cfg.max_length, titles=cfg.titles)
        (path / PARAMS_FILE).write_text(json.dumps(params.to_json(), indent=2), encoding="utf-8")
        metrics.update(fit=asdict(fit), params=params.to_json(), runtime=reranker.backend.value, total_seconds=round(time.perf_counter() - t0, 1))
        log.info("reranker fit on %d validation questions: %s", len(val), metrics["fit"])

    manifest = {
        "index": versions.get("index"),
        "retriever": versions.get("retriever"),
        "domains": versions.get("domains"),
        "base_model": base_model or "all-MiniLM-L6-v2 (shipped)",
        "config": asdict(cfg),
        "loss": "MultipleNegativesRankingLoss (raw logits) over gold + one in-batch + hard negatives, + BCE of gold (1) vs out-of-scope (0) pairs",
        "data_fingerprint": data.fingerprint,
        "data": str(data.path),
    }
    version = save_version(Registry(settings.home_dir), "reranker", write, metrics, manifest, activate=activate)
    return version, metrics


def _export(path: Path, questions: list[Candidates], cfg: RerankerConfig) -> None:
    """The ONNX int8 export beside the model, calibrated on questions of this corpus with their top passages; a
    failed export is logged and the version runs on PyTorch."""
    from service.reranking.onnx_export import export_reranker
    from service.retrieval.onnx_encoder import OnnxExportError

    pairs = [(c.query, t) for c in questions for t in c.texts[:2]][:CALIBRATION_PAIRS]
    try:
        export_reranker(path / MODEL_DIR, path / ONNX_DIR, pairs, max_length=cfg.max_length)
    except OnnxExportError as exc:
        log.warning("reranker saved without its ONNX export (%s): it runs on PyTorch", exc)
