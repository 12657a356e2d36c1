"""Train the retriever: a shared-weight bi-encoder fine-tuned with symmetric supervised InfoNCE.

The model is the service's own sentence-transformers encoder (the shipped MiniLM by default);
queries and passages go through the same weights. Each batch holds B queries, each with its gold
passages (up to ``max_positives``) and ``negatives_per_query`` hard negatives; every other
query's passages are in-batch negatives. The loss is
:class:`training.losses.SymmetricInfoNCELoss` (several positives per query count as positives).

A plain torch loop rather than ``SentenceTransformerTrainer``: batches are built per query with
a variable number of gold passages and a positive mask over deduplicated passages, which the
trainer's fixed-column collator cannot express, and the loop keeps the CPU path lean (no
datasets conversion, no evaluator plumbing) with a checkpoint every N steps and a clean Ctrl-C.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from service.artifacts import Registry
from service.compute import MODEL_LOCK
from service.config import Settings
from service.evaluation.retrieval_metrics import ranking_means
from service.queries import LabelledQuery
from service.retrieval.encoder import packaged_minilm_path
from service.retrieval.passage import Passage
from training.checkpoint import StopFlag, TrainingInterrupted, load_checkpoint_state, load_extra, save_checkpoint
from training.configs import RetrieverConfig
from training.data.dataset import RetrieverExample, TrainingData
from training.dropout import NO_DROPOUT
from training.losses.symmetric_infonce import SymmetricInfoNCELoss, positive_mask
from training.precision import TrainingPrecision, autocast, resolve
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

    Checkpoints (model, optimizer, scheduler, position) go to ``checkpoint_dir/last`` every
    ``checkpoint_every`` steps and when ``stop`` is requested, which then raises
    :class:`TrainingInterrupted`. ``resume`` continues from a checkpoint with the same examples.
    """
    cfg = config or RetrieverConfig()
    usable = [e for e in examples if any(p in passages for p in e.positives)]
    if not usable:
        raise ValueError("no retriever example has a gold passage in the training set's passages")
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0}
    source = Path(base_model) if base_model else packaged_minilm_path()
    if resume:
        state.update(load_checkpoint_state(resume))
        source = Path(resume) / "model"
    model = sentence_transformer(source, cfg)
    if cfg.freeze_embeddings:  # half the weights; frozen, CPU steps are faster and few examples overfit less
        model[0].auto_model.get_input_embeddings().weight.requires_grad_(False)
    per_epoch = (len(usable) + cfg.batch_size - 1) // cfg.batch_size
    total_steps = per_epoch * cfg.epochs
    opt, sched = _optimizer(model, cfg, total_steps, resume)
    step = functools.partial(_step, model, SymmetricInfoNCELoss(model, temperature=cfg.temperature), opt, sched, precision=resolve(cfg.precision))
    stop = stop or StopFlag()
    checkpoint = functools.partial(_checkpoint, checkpoint_dir, model, state, cfg, len(usable), opt, sched)

    model.train()
    with MODEL_LOCK, tqdm(total=total_steps, initial=state["global_step"], desc="training retriever", unit="step", disable=not progress) as bar:
        while state["epoch"] < cfg.epochs:
            order = list(range(len(usable)))
            random.Random(f"{cfg.seed}:{state['epoch']}").shuffle(order)
            running = None
            for b in range(state["step_in_epoch"], per_epoch):
                batch = [usable[i] for i in order[b * cfg.batch_size : (b + 1) * cfg.batch_size]]
                value = step(_batch_texts(batch, passages, cfg))
                running = value if running is None else 0.9 * running + 0.1 * value
                state["step_in_epoch"], state["global_step"] = b + 1, state["global_step"] + 1
                bar.update(1)
                bar.set_postfix(epoch=state["epoch"] + 1, loss=f"{running:.4f}")
                if stop.requested:
                    model.eval()
                    raise TrainingInterrupted(checkpoint())
                if cfg.checkpoint_every and state["global_step"] % cfg.checkpoint_every == 0:
                    checkpoint()
            state["epoch"], state["step_in_epoch"] = state["epoch"] + 1, 0
    model.eval()
    return model


def sentence_transformer(source: str | Path, cfg: RetrieverConfig) -> SentenceTransformer:
    """A local sentence-transformers model on the CPU, its inputs cut to ``max_seq_length`` tokens, without dropout
    unless ``cfg.dropout``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(source), device="cpu", local_files_only=True, config_kwargs=None if cfg.dropout else NO_DROPOUT)
    model.max_seq_length = cfg.max_seq_length
    return model


def _optimizer(model: SentenceTransformer, cfg: RetrieverConfig, total_steps: int, resume: Path | None) -> tuple[Any, Any]:
    """AdamW over the trainable weights and a linear warm-up schedule (both restored when resuming), and on
    resume the random state, so dropout draws continue where the interrupted run stopped."""
    from transformers import get_linear_schedule_with_warmup

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * total_steps), total_steps)
    if resume:
        for obj, name in ((opt, "optimizer"), (sched, "scheduler")):
            saved = load_extra(Path(resume), name)
            if saved is not None:
                obj.load_state_dict(saved)
        if (rng := load_extra(Path(resume), "rng")) is not None:
            torch.set_rng_state(rng)
    return opt, sched


def _step(
    model: SentenceTransformer,
    loss_fn: SymmetricInfoNCELoss,
    opt: Any,
    sched: Any,
    texts: tuple[list[str], list[set[str]], list[str], list[str]],
    precision: TrainingPrecision = TrainingPrecision.FP32,
) -> float:
    """One optimisation step on a batch (queries, their gold doc_ids, the batch's doc_ids and texts), its forward pass in
    ``precision``; returns the loss."""
    queries, golds, doc_ids, passage_texts = texts
    with autocast(precision):
        loss = loss_fn(model.preprocess(queries), model.preprocess(passage_texts), positive_mask(golds, doc_ids))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    sched.step()
    return loss.item()


def _checkpoint(
    checkpoint_dir: Path | None, model: SentenceTransformer, state: dict[str, int], cfg: RetrieverConfig, examples: int, opt: Any, sched: Any
) -> Path | None:
    """Save the run so far (model, optimizer, scheduler, random state, position); None without a checkpoint folder."""
    if checkpoint_dir is None:
        return None
    return save_checkpoint(
        Path(checkpoint_dir),
        lambda p: model.save(str(p)),
        {**state, "config": asdict(cfg), "examples": examples, "kind": "retriever"},
        {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": torch.get_rng_state()},
    )


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
