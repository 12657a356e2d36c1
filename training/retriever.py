"""Train the retriever: a shared-weight bi-encoder fine-tuned with symmetric supervised InfoNCE.

The model is the service's own sentence-transformers encoder (the shipped MiniLM by default);
queries and passages go through the same weights. Each batch holds B queries, each with its gold
passages (up to ``max_positives``) and ``negatives_per_query`` hard negatives; every other
query's passages are in-batch negatives. The loss is
:class:`training.losses.SymmetricInfoNCELoss` (several positives per query count as positives).

sentence-transformers' ``SentenceTransformerTrainer`` runs the steps: AdamW with a linear warm-up, gradient
clipping, bf16 autocast (``--precision``), checkpoints every ``checkpoint_every`` steps
(``checkpoint_dir/checkpoint-N``, the newest kept), ``--resume`` and the random state (dropout) come from the
library. The batches are built here, as the hand-written loop this replaced built them: each epoch shuffles the
examples with a generator seeded by the epoch, and a step's batch (its queries, the deduplicated passages of
their gold and hard-negative sets, the positive mask between them) is one row of the dataset (:func:`_dataset`),
read in order one row a step (:func:`~training.trainer_parts.in_order`) and tokenised by :func:`_collator` into
the two columns and the label the loss takes. Ctrl-C (:class:`~training.checkpoint.StopFlag`) ends the step with
a checkpoint through a trainer callback (:func:`~training.trainer_parts.stop_callback`).
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from service.artifacts import Registry
from service.compute import MODEL_LOCK
from service.config import Settings
from service.evaluation.retrieval_metrics import ranking_means
from service.queries import LabelledQuery
from service.retrieval.encoder import packaged_minilm_path
from service.retrieval.passage import Passage
from training.checkpoint import StopFlag, TrainingInterrupted
from training.configs import RetrieverConfig
from training.data.dataset import RetrieverExample, TrainingData
from training.dropout import NO_DROPOUT
from training.losses.symmetric_infonce import SymmetricInfoNCELoss, positive_mask
from training.precision import resolve
from training.trainer_parts import check_resumable, drop_stale_checkpoints, interrupted, recipe_arguments, stop_callback
from training.versions import save_version

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("fedqa.training.retriever")


def select_examples(rows: Sequence[RetrieverExample], cfg: RetrieverConfig) -> list[RetrieverExample]:
    """Labelled and cross-domain examples (``labelled_repeat`` times each), then synthetic ones up to ``max_examples``.

    Synthetic examples are a seeded sample balanced over domains (round robin), so one large
    product does not crowd out the others.
    """
    expert = [r for r in rows if r.origin != "synthetic"]
    synthetic = [r for r in rows if r.origin == "synthetic"]
    out = [r for r in expert for _ in range(max(1, cfg.labelled_repeat))]
    room = len(synthetic) if cfg.max_examples is None else max(0, cfg.max_examples - len(out))
    rng = random.Random(f"{cfg.seed}:select")
    by_domain: dict[str, list[RetrieverExample]] = {}
    for r in synthetic:
        by_domain.setdefault(r.domains[0] if r.domains else "", []).append(r)
    for group in by_domain.values():
        rng.shuffle(group)
    picked: list[RetrieverExample] = []
    while len(picked) < room and any(by_domain.values()):
        for d in sorted(by_domain):
            if by_domain[d] and len(picked) < room:
                picked.append(by_domain[d].pop())
    return out + picked


def _batch_texts(
    batch: Sequence[RetrieverExample], passages: dict[str, Passage], cfg: RetrieverConfig
) -> tuple[list[str], list[set[str]], list[str], list[str]]:
    queries, golds, doc_ids = [], [], []
    seen: set[str] = set()
    for ex in batch:
        queries.append(ex.query)
        golds.append(set(ex.positives))
        for d in ex.positives[: cfg.max_positives] + ex.negatives[: cfg.negatives_per_query]:
            if d not in seen and d in passages:
                seen.add(d)
                doc_ids.append(d)
    return queries, golds, doc_ids, [passages[d].text for d in doc_ids]


def _dataset(usable: Sequence[RetrieverExample], passages: dict[str, Passage], cfg: RetrieverConfig) -> Any:
    """Every step's batch, epoch after epoch, as one row of a ``datasets.Dataset``: ``queries``, ``passages`` (the
    batch's deduplicated passage texts) and ``label`` (the positive mask, queries by passages). Each epoch's order
    is the examples shuffled by a generator seeded by the epoch, cut into ``batch_size`` questions (the last batch
    shorter)."""
    from datasets import Dataset, Features, List, Value

    columns: dict[str, list[Any]] = {"queries": [], "passages": [], "label": []}
    for epoch in range(cfg.epochs):
        order = list(range(len(usable)))
        random.Random(f"{cfg.seed}:{epoch}").shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            queries, golds, doc_ids, texts = _batch_texts([usable[i] for i in order[start : start + cfg.batch_size]], passages, cfg)
            columns["queries"].append(queries)
            columns["passages"].append(texts)
            columns["label"].append(positive_mask(golds, doc_ids).tolist())
    features = Features({"queries": List(Value("string")), "passages": List(Value("string")), "label": List(List(Value("bool")))})
    return Dataset.from_dict(columns, features=features)


def _collator(model: SentenceTransformer) -> Any:
    """The trainer's collator for :func:`_dataset`'s rows, one a step: the row's queries and passages tokenised as
    the columns ``queries`` and ``passages`` (which the trainer hands to the loss in that order) and its mask as the
    label. The library's own collator tokenises one text per row and column, where a step has its own number of
    queries, of passages and a mask between them."""
    from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator

    class StepCollator(SentenceTransformerDataCollator):
        def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
            (row,) = features
            batch: dict[str, Any] = {"label": torch.tensor(row["label"], dtype=torch.bool)}
            for column in ("queries", "passages"):
                batch.update({f"{column}_{key}": value for key, value in self.preprocess_fn(row[column]).items()})
            return batch

    return StepCollator(preprocess_fn=model.preprocess)


def train_retriever(
    examples: Sequence[RetrieverExample],
    passages: dict[str, Passage],
    *,
    base_model: str | Path | None = None,
    config: RetrieverConfig | None = None,
    progress: bool = True,
    stop: StopFlag | None = None,
    checkpoint_dir: Path | None = None,
    resume: Path | None = None,
) -> SentenceTransformer:
    """Fine-tune the bi-encoder on ``examples``; returns the trained SentenceTransformer.

    Checkpoints go to ``checkpoint_dir/checkpoint-<step>`` (the newest kept) every ``checkpoint_every`` steps and
    when ``stop`` is requested (which then raises :class:`TrainingInterrupted` naming it); ``resume`` continues
    from one with the same examples.
    """
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from transformers.trainer_callback import PrinterCallback

    cfg = config or RetrieverConfig()
    usable = [e for e in examples if any(p in passages for p in e.positives)]
    if not usable:
        raise ValueError("no retriever example has a gold passage in the training set's passages")
    if resume:
        check_resumable(Path(resume))
    model = sentence_transformer(Path(resume) if resume else Path(base_model) if base_model else packaged_minilm_path(), cfg)
    if cfg.freeze_embeddings:  # half the weights; frozen, CPU steps are faster and few examples overfit less
        model[0].auto_model.get_input_embeddings().weight.requires_grad_(False)
    dataset = _dataset(usable, passages, cfg)
    stop = stop or StopFlag()
    with tempfile.TemporaryDirectory(prefix="fedqa-retriever-") as scratch:
        out = Path(checkpoint_dir) if checkpoint_dir else Path(scratch)
        if checkpoint_dir:
            drop_stale_checkpoints(out, keep=Path(resume) if resume else None)
        trainer = SentenceTransformerTrainer(
            model=model,
            args=recipe_arguments(
                SentenceTransformerTrainingArguments, cfg, out, len(dataset), 1, resolve(cfg.precision), "cpu", checkpoint_dir is not None, progress
            ),
            train_dataset=dataset,
            loss=SymmetricInfoNCELoss(model, temperature=cfg.temperature),
            data_collator=_collator(model),
            callbacks=[stop_callback(stop, save=checkpoint_dir is not None)],
        )
        trainer.remove_callback(PrinterCallback)  # without a progress bar: no printed log lines
        with MODEL_LOCK:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        model.eval()
        if stop.requested:
            raise interrupted(out, trainer.state.global_step, saved=checkpoint_dir is not None)
    return model


def sentence_transformer(source: str | Path, cfg: RetrieverConfig) -> SentenceTransformer:
    """A local sentence-transformers model on the CPU, its inputs cut to ``max_seq_length`` tokens, without dropout
    unless ``cfg.dropout``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(source), device="cpu", local_files_only=True, config_kwargs=None if cfg.dropout else NO_DROPOUT)
    model.max_seq_length = cfg.max_seq_length
    return model


def rank_pool(
    model: SentenceTransformer, queries: Sequence[str], pool: Sequence[Passage], *, top: int = 100, progress: bool = False
) -> list[list[str]]:
    """Doc_ids of ``pool`` ranked by cosine similarity for each query (best first, ``top`` of them)."""
    with MODEL_LOCK, torch.inference_mode():
        docs = model.encode([p.text for p in pool], batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=progress)
        qs = model.encode(list(queries), batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    scores = qs @ docs.T
    ids = [p.doc_id for p in pool]
    k = min(top, len(ids))
    out = []
    for row in scores:
        best = np.argpartition(-row, k - 1)[:k]
        out.append([ids[i] for i in best[np.argsort(-row[best])]])
    return out


def evaluate_on_pool(model: SentenceTransformer, val: Sequence[LabelledQuery], pool: Sequence[Passage], *, progress: bool = False) -> dict:
    """Acc@1, Recall@5/10 and MRR of ``model`` ranking the fixed candidate ``pool`` for each validation query."""
    val = [q for q in val if q.gold_doc_ids]
    rankings = rank_pool(model, [q.query for q in val], pool, progress=progress)
    out: dict = ranking_means(rankings, [q.gold_doc_ids for q in val])
    out["candidates"] = len(pool)
    return out


def _save_with_onnx(model, path: Path, passages: Iterable[str]) -> None:  # noqa: ANN001 - a SentenceTransformer
    """Save the model and its ONNX int8 export beside it (``onnx/``), so serving need not export it; the export's
    smoothing is calibrated on a sample of ``passages`` (the training corpus', which the version will embed).

    A failed export is logged, not fatal: the service then exports at first use or runs PyTorch.
    """
    from service.retrieval.encoder import model_fingerprint
    from service.retrieval.onnx_encoder import OnnxExportError, export_onnx
    from service.retrieval.onnx_smoothing import corpus_calibration

    model.save(str(path))
    try:
        export_onnx(model, path / "onnx", source=model_fingerprint(path), calibration=corpus_calibration(passages))
    except OnnxExportError as exc:
        log.warning("retriever saved without its ONNX export: %s", exc)


def train_and_save(
    settings: Settings,
    data: TrainingData,
    *,
    config: RetrieverConfig | None = None,
    base_model: str | None = None,
    activate: bool = True,
    evaluate_base: bool = True,
    progress: bool = True,
    stop: StopFlag | None = None,
    resume: Path | None = None,
) -> tuple[str, dict]:
    """Train on a training-set folder, evaluate base and fine-tuned on its validation pool, save a retriever version.

    Returns (version, metrics). The version is a sentence-transformers folder plus ``metrics.json``;
    its manifest records the metrics, the base model, the loss and the data fingerprint. The
    service keeps its index (and the encoder recorded in it) until ``fedqa index build`` re-embeds
    the corpus with the new version.
    """
    t0 = time.perf_counter()
    cfg = config or RetrieverConfig()
    registry = Registry(settings.home_dir)
    base = base_model or settings.encoder_model or str(packaged_minilm_path())
    examples = select_examples(data.retriever_rows, cfg)
    pool = [data.passages[d] for d in data.val_pool if d in data.passages]
    val = [q for q in data.val if q.gold_doc_ids]
    metrics: dict = {"validation_pool": len(pool), "validation_queries": len(val)}
    if evaluate_base and val and pool:
        metrics["base"] = evaluate_on_pool(sentence_transformer(base, cfg), val, pool, progress=progress)
        log.info("base retriever on the validation pool: %s", metrics["base"])
    if stop is not None and stop.requested:  # Ctrl-C during the base evaluation: nothing trained yet
        raise TrainingInterrupted(None)
    if cfg.negative_margin is not None:  # deterministic given the base model, so a resumed run filters the same way
        from training.data.negatives import drop_false_negatives

        examples, metrics["negatives_filter"] = drop_false_negatives(
            examples, data.passages, sentence_transformer(base, cfg), margin=cfg.negative_margin
        )
        log.info("hard negatives within the margin of the positive: %s", metrics["negatives_filter"])
    t_train = time.perf_counter()
    model = train_retriever(
        examples,
        data.passages,
        base_model=base,
        config=cfg,
        progress=progress,
        stop=stop,
        checkpoint_dir=settings.home_dir / "checkpoints" / "retriever",
        resume=resume,
    )
    metrics["train_seconds"] = round(time.perf_counter() - t_train, 1)
    metrics["precision"] = resolve(cfg.precision).value
    if val and pool:
        metrics["fine_tuned"] = evaluate_on_pool(model, val, pool, progress=progress)
        log.info("fine-tuned retriever on the validation pool: %s", metrics["fine_tuned"])
    metrics["total_seconds"] = round(time.perf_counter() - t0, 1)
    texts = [p.text for p in data.passages.values()]
    manifest = _manifest(model, base, cfg, examples, data)
    version = save_version(registry, "retriever", lambda path: _save_with_onnx(model, path, texts), metrics, manifest, activate=activate)
    return version, metrics


def _manifest(model: SentenceTransformer, base: str, cfg: RetrieverConfig, examples: Sequence[RetrieverExample], data: TrainingData) -> dict:
    """What a retriever version records beside its metrics: base model, loss, configuration and training data."""
    return {
        "base_model": base,
        "loss": SymmetricInfoNCELoss(model, cfg.temperature).get_config_dict(),
        "config": asdict(cfg),
        "train_examples": len(examples),
        "train_examples_by_origin": dict(Counter(e.origin for e in examples)),
        "data_fingerprint": data.fingerprint,
        "data": str(data.path),
    }
