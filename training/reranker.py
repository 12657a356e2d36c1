"""Train the reranker: a cross-encoder from the shipped MiniLM that reads a question and a passage together.

Each step takes ``batch_size`` in-scope questions, each with its gold passage and ``negatives`` hard negatives
drawn from the ranking it will rerank, and ``oos_per_step`` out-of-scope questions with their top candidates. One
forward pass scores every pair; the loss is sentence-transformers' cross-encoder
:class:`~sentence_transformers.cross_encoder.losses.MultipleNegativesRankingLoss` on the raw logits (a softmax
cross-entropy: the gold passage against its hard negatives and one in-batch negative) plus a binary cross-entropy
of the gold pairs (1) against the out-of-scope pairs (0), which sets the logit's level across questions (what "not
covered" reads) without pushing the hard negatives, often half-relevant, far down.

A plain loop rather than ``CrossEncoderTrainer``: the in-scope groups and the out-of-scope pairs share one
forward pass, and the loop keeps the retriever's checkpoint-and-Ctrl-C behaviour (training/checkpoint.py).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from service.compute import MODEL_LOCK
from service.retrieval.encoder import packaged_minilm_path
from training.checkpoint import StopFlag, TrainingInterrupted, load_checkpoint_state, load_extra, save_checkpoint
from training.configs import RerankerConfig
from training.dropout import NO_DROPOUT
from training.precision import autocast, resolve
from training.reranker_data import Candidates


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


def _batch(in_scope: list[Candidates], oos: list[Candidates], cfg: RerankerConfig, rng: random.Random) -> tuple[list[tuple[str, str]], int]:
    """Pairs of one step: in-scope groups column by column (positives, in-batch negatives, hard negatives),
    then the out-of-scope pairs; and the number of in-scope questions."""
    chosen = rng.sample(in_scope, min(cfg.batch_size, len(in_scope)))
    groups = [_group(c, cfg.negatives, rng) for c in chosen]
    qs = [c.query for c in chosen]
    b = len(qs)
    pairs = [(q, g[0]) for q, g in zip(qs, groups, strict=True)]
    # one in-batch negative: the next question's gold passage (a hard negative where it is this question's own)
    pairs += [(q, groups[(i + 1) % b][0] if groups[(i + 1) % b][0] != groups[i][0] else groups[i][1][0]) for i, q in enumerate(qs)]
    for j in range(cfg.negatives):
        pairs += [(q, g[1][j]) for q, g in zip(qs, groups, strict=True)]
    for c in rng.sample(oos, min(cfg.oos_per_step, len(oos))):
        pairs += [(c.query, t) for t in c.texts[: cfg.negatives + 1]]
    return pairs, b


def _loss(model, pairs: list[tuple[str, str]], b: int, cfg: RerankerConfig, ranking_loss) -> torch.Tensor:  # noqa: ANN001
    """Ranking loss over the in-scope columns plus binary cross-entropy of the gold pairs against the out-of-scope ones."""
    inputs = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in model.preprocess(pairs).items()}
    logits = model(inputs)["scores"].reshape(-1)
    columns = 2 + cfg.negatives
    grouped = [logits[i * b : (i + 1) * b] for i in range(columns)]
    level = torch.cat([logits[:b], logits[columns * b :]])
    labels = torch.zeros_like(level)
    labels[:b] = 1.0
    bce = torch.nn.functional.binary_cross_entropy_with_logits(level, labels)
    return ranking_loss.calculate_loss(grouped, b) + bce


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
):  # noqa: ANN201 - a CrossEncoder
    """Fine-tune the cross-encoder for ``config.steps`` steps on ``device``; returns the trained model.

    Checkpoints go to ``checkpoint_dir/last`` every ``checkpoint_every`` steps and when ``stop`` is requested
    (which then raises :class:`TrainingInterrupted`); ``resume`` continues from one."""
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss

    usable = [c for c in in_scope if any(c.gold)]
    if not usable:
        raise ValueError("no reranker question has a gold passage among its candidates")
    torch.manual_seed(config.seed)
    state = {"global_step": 0}
    source: str | Path | None = base_model
    if resume:
        state.update(load_checkpoint_state(resume))
        source = Path(resume) / "model"
    model = cross_encoder(source, config.max_length, device, layers=config.layers, dropout=config.dropout)
    if config.freeze_embeddings:
        model.model.get_input_embeddings().weight.requires_grad_(False)
    ranking_loss = MultipleNegativesRankingLoss(model, num_negatives=None, scale=1.0, activation_fn=None)
    opt, sched = _optimizer(model, config, resume)
    stop = stop or StopFlag()
    precision = resolve(config.precision, device)  # once: ``auto`` reads the CPU's flags
    model.train()
    with MODEL_LOCK, tqdm(total=config.steps, initial=state["global_step"], desc="training reranker", unit="step", disable=not progress) as bar:
        while state["global_step"] < config.steps:
            rng = random.Random(f"{config.seed}:{state['global_step']}")
            pairs, b = _batch(usable, oos, config, rng)
            with autocast(precision, device):
                loss = _loss(model, pairs, b, config, ranking_loss)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            state["global_step"] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.4f}")
            if stop.requested or (checkpoint_dir and config.checkpoint_every and state["global_step"] % config.checkpoint_every == 0):
                where = _checkpoint(checkpoint_dir, model, state, config, opt, sched)
                if stop.requested:
                    model.eval()
                    raise TrainingInterrupted(where)
    model.eval()
    return model


def _optimizer(model, cfg: RerankerConfig, resume: Path | None) -> tuple[Any, Any]:  # noqa: ANN001
    """AdamW over the trainable weights with a linear warm-up schedule (restored when resuming)."""
    from transformers import get_linear_schedule_with_warmup

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * cfg.steps), cfg.steps)
    if resume:
        for obj, name in ((opt, "optimizer"), (sched, "scheduler")):
            saved = load_extra(Path(resume), name)
            if saved is not None:
                obj.load_state_dict(saved)
    return opt, sched


def _checkpoint(checkpoint_dir: Path | None, model, state: dict[str, int], cfg: RerankerConfig, opt: Any, sched: Any) -> Path | None:  # noqa: ANN001
    """Save the run so far (model, optimizer, scheduler, position); None without a checkpoint folder."""
    if checkpoint_dir is None:
        return None
    return save_checkpoint(
        Path(checkpoint_dir),
        lambda p: model.save(str(p)),
        {**state, "config": asdict(cfg), "kind": "reranker", "saved": time.time()},
        {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
    )
