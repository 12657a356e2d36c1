"""Train the reranker: a cross-encoder from the shipped MiniLM that reads a question and a passage together.

Each step takes ``batch_size`` in-scope questions, each with its gold passage and ``negatives`` hard negatives
drawn from the ranking it will rerank, and ``oos_per_step`` out-of-scope questions with their top candidates. One
forward pass scores every pair; the loss is a softmax cross-entropy of the gold passage against its hard negatives
and one in-batch negative (sentence-transformers' cross-encoder ``MultipleNegativesRankingLoss`` on the raw
logits, scale 1) plus a binary cross-entropy of the gold pairs (1) against the out-of-scope pairs (0), which sets
the logit's level across questions (what "not covered" reads) without pushing the hard negatives, often
half-relevant, far down.

sentence-transformers' ``CrossEncoderTrainer`` runs the steps: AdamW with a linear warm-up, gradient clipping,
bf16 autocast (``--precision``), checkpoints every ``checkpoint_every`` steps (``checkpoint_dir/checkpoint-N``,
the newest kept), ``--resume`` and the random state (dropout) come from the library. The steps' batches are drawn
here, each from a generator seeded by its step, written out in order as one row per question (:func:`_step_rows`)
and handed to the trainer unshuffled (:func:`~training.trainer_parts.in_order`), so a resumed run sees the batches
an uninterrupted one does; :class:`RerankerLoss` turns a batch's rows into the pairs of its one forward pass.
Ctrl-C (:class:`~training.checkpoint.StopFlag`) ends the step with a checkpoint through a trainer callback
(:func:`~training.trainer_parts.stop_callback`).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from service.compute import MODEL_LOCK
from service.retrieval.encoder import packaged_minilm_path
from training.checkpoint import StopFlag
from training.configs import RerankerConfig
from training.dropout import NO_DROPOUT
from training.precision import resolve
from training.reranker_data import Candidates
from training.trainer_parts import check_resumable, drop_stale_checkpoints, interrupted, recipe_arguments, stop_callback


def cross_encoder(source: str | Path | None, max_length: int, device: str = "cpu", *, layers: int | None = None, dropout: bool = True):  # noqa: ANN201 - a sentence_transformers CrossEncoder
    """A one-logit cross-encoder on ``device``, initialised from ``source`` (default: the shipped MiniLM), cut to
    its first ``layers`` transformer layers (its config says so, so the saved model and its export load as cut),
    without dropout unless ``dropout``."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(
        str(source or packaged_minilm_path()),
        num_labels=1,
        max_length=max_length,
        device=device,
        local_files_only=True,
        config_kwargs=None if dropout else NO_DROPOUT,
    )
    encoder = getattr(model.model, model.model.base_model_prefix).encoder
    if layers is not None and layers < len(encoder.layer):
        if layers < 1:
            raise ValueError(f"a cross-encoder needs at least one layer, not {layers}")
        encoder.layer = encoder.layer[:layers]
        model.model.config.num_hidden_layers = layers
    return model


def _group(c: Candidates, k: int, rng: random.Random) -> tuple[str, list[str]]:
    """An in-scope question's gold passage followed by ``k`` of its ranking's other passages, drawn at random."""
    pos = next(t for t, g in zip(c.texts, c.gold, strict=True) if g)
    neg = [t for t, g in zip(c.texts, c.gold, strict=True) if not g]
    picked = rng.sample(neg, min(k, len(neg)))
    while len(picked) < k:  # a very short ranking: repeat (still negatives)
        picked.append(neg[len(picked) % len(neg)] if neg else pos)
    return pos, picked


def _step_rows(in_scope: list[Candidates], oos: list[Candidates], cfg: RerankerConfig, step: int) -> list[tuple[str, list[str], int, int]]:
    """The rows of one step, drawn from a generator seeded by the step: (question, passages, how many of them are
    read, label). Each in-scope question (label 1) with its gold passage, one in-batch negative and its hard
    negatives; then each out-of-scope question (label 0) with its first ``negatives + 1`` candidates (fewer where
    its ranking is shorter; the row padded with empty strings, not read)."""
    rng = random.Random(f"{cfg.seed}:{step}")
    chosen = rng.sample(in_scope, min(cfg.batch_size, len(in_scope)))
    groups = [_group(c, cfg.negatives, rng) for c in chosen]
    b = len(chosen)
    rows: list[tuple[str, list[str], int, int]] = []
    for i, (c, (pos, hard)) in enumerate(zip(chosen, groups, strict=True)):
        # one in-batch negative: the next question's gold passage (a hard negative where it is this question's own)
        nxt = groups[(i + 1) % b][0]
        rows.append((c.query, [pos, nxt if nxt != pos else hard[0], *hard], 2 + cfg.negatives, 1))
    width = 2 + cfg.negatives
    for c in rng.sample(oos, min(cfg.oos_per_step, len(oos))):
        texts = list(c.texts[: cfg.negatives + 1])
        rows.append((c.query, texts + [""] * (width - len(texts)), len(texts), 0))
    return rows


def _dataset(in_scope: list[Candidates], oos: list[Candidates], cfg: RerankerConfig) -> tuple[Any, int]:
    """Every step's rows, step after step, as a ``datasets.Dataset`` (columns ``query``, ``p0``.., ``read``,
    ``label``), and the rows of a step."""
    from datasets import Dataset, Features, Value

    width = 2 + cfg.negatives
    columns: dict[str, list[Any]] = {"query": [], **{f"p{j}": [] for j in range(width)}, "read": [], "label": []}
    per_step = 0
    for step in range(cfg.steps):
        rows = _step_rows(in_scope, oos, cfg, step)
        per_step = len(rows)
        for query, passages, read, label in rows:
            columns["query"].append(query)
            for j, text in enumerate(passages):
                columns[f"p{j}"].append(text)
            columns["read"].append(read)
            columns["label"].append(label)
    texts = {f"p{j}": Value("string") for j in range(width)}
    features = Features({"query": Value("string"), **texts, "read": Value("int64"), "label": Value("int64")})
    return Dataset.from_dict(columns, features=features), per_step


class RerankerLoss(torch.nn.Module):
    """The reranker's loss on one batch of :func:`_step_rows`, in one forward pass of its pairs: ``ranking``, the
    softmax cross-entropy of each in-scope question's gold passage among its passages (the cross-encoder
    ``MultipleNegativesRankingLoss`` on raw logits, scale 1), and ``level``, the binary cross-entropy of the gold
    pairs (1) against every out-of-scope pair (0). The trainer adds the two and logs each."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model  # the trainer's optimiser takes the parameters from here

    def forward(self, inputs: list[list[Any]], labels: torch.Tensor, prompt: str | None = None, task: str | None = None) -> dict[str, torch.Tensor]:
        """``inputs``: the columns (queries, passages ``p0``.., how many passages a row reads); ``labels``: 1 for an
        in-scope row, 0 for an out-of-scope one."""
        from sentence_transformers.util import batch_to_device

        queries, columns, read = inputs[0], inputs[1:-1], inputs[-1]
        flags = [bool(x) for x in labels.tolist()]
        ins = [i for i, f in enumerate(flags) if f]
        outs = [i for i, f in enumerate(flags) if not f]
        b = len(ins)
        # in-scope pairs column by column (golds, in-batch negatives, hard negatives), then the out-of-scope pairs
        pairs = [(queries[i], col[i]) for col in columns for i in ins]
        pairs += [(queries[i], col[i]) for i in outs for col in columns[: int(read[i])]]
        features = batch_to_device(self.model.preprocess(pairs, prompt=prompt, task=task), self.model.device)
        logits = self.model(features)["scores"].reshape(-1).float()
        grouped = logits[: len(columns) * b].reshape(len(columns), b).T  # (question, passage): the gold first
        ranking = torch.nn.functional.cross_entropy(grouped, torch.zeros(b, dtype=torch.long, device=logits.device))
        level = torch.cat([logits[:b], logits[len(columns) * b :]])
        target = torch.zeros_like(level)
        target[:b] = 1.0
        return {"ranking": ranking, "level": torch.nn.functional.binary_cross_entropy_with_logits(level, target)}


def train_reranker(
    in_scope: list[Candidates],
    oos: list[Candidates],
    *,
    config: RerankerConfig,
    base_model: str | None = None,
    progress: bool = True,
    stop: StopFlag | None = None,
    checkpoint_dir: Path | None = None,
    resume: Path | None = None,
    device: str = "cpu",
    log_history: list[dict[str, float]] | None = None,
):  # noqa: ANN201 - a CrossEncoder
    """Fine-tune the cross-encoder for ``config.steps`` steps on ``device``; returns the trained model.

    Checkpoints go to ``checkpoint_dir/checkpoint-<step>`` (the newest kept) every ``checkpoint_every`` steps and
    when ``stop`` is requested (which then raises :class:`TrainingInterrupted` naming it); ``resume`` continues from
    one. ``log_history``, when given, receives the trainer's log entries (step, loss and its two terms)."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from transformers.trainer_callback import PrinterCallback

    usable = [c for c in in_scope if any(c.gold)]
    if not usable:
        raise ValueError("no reranker question has a gold passage among its candidates")
    if resume:
        check_resumable(Path(resume))
    torch.manual_seed(config.seed)  # the new classification head's initial weights
    model = cross_encoder(Path(resume) if resume else base_model, config.max_length, device, layers=config.layers, dropout=config.dropout)
    if config.freeze_embeddings:
        model.model.get_input_embeddings().weight.requires_grad_(False)
    dataset, per_step = _dataset(usable, oos, config)
    precision = resolve(config.precision, device)  # once: ``auto`` reads the CPU's flags
    stop = stop or StopFlag()
    with tempfile.TemporaryDirectory(prefix="fedqa-reranker-") as scratch:
        out = Path(checkpoint_dir) if checkpoint_dir else Path(scratch)
        if checkpoint_dir:
            drop_stale_checkpoints(out, keep=Path(resume) if resume else None)
        args = recipe_arguments(
            CrossEncoderTrainingArguments, config, out, config.steps, per_step, precision, device, checkpoint_dir is not None, progress
        )
        trainer = CrossEncoderTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            loss=RerankerLoss(model),
            callbacks=[stop_callback(stop, save=checkpoint_dir is not None)],
        )
        trainer.remove_callback(PrinterCallback)  # without a progress bar: no printed log lines
        with MODEL_LOCK:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        if log_history is not None:
            log_history.extend(trainer.state.log_history)
        model.eval()
        if stop.requested:
            raise interrupted(out, trainer.state.global_step, saved=checkpoint_dir is not None)
    return model
