"""What the retriever's and the reranker's sentence-transformers trainers share around the library's loop.

Both trainers draw every step's batch beforehand, write the batches out in order and have the trainer read them
unshuffled (:func:`in_order`), so a run resumed from a ``checkpoint-<step>`` folder sees the batches an
uninterrupted one does. Ctrl-C (:class:`~training.checkpoint.StopFlag`) ends training after the current step with a
checkpoint through a trainer callback (:func:`stop_callback`). A new run first removes an earlier run's checkpoints
from its folder (:func:`drop_stale_checkpoints`): the trainer keeps the newest by step, which could otherwise be a
stale one, and ``last`` folders written by the hand-written loops these trainers replaced cannot be resumed.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from training.checkpoint import StopFlag, TrainingInterrupted
from training.configs import RerankerConfig, RetrieverConfig
from training.precision import TrainingPrecision

log = logging.getLogger("fedqa.training")

#: the checkpoint folder of the hand-written training loops (model/, optimizer.pt, ...), and its temporary siblings
OLD_LOOP_CHECKPOINTS = ("last", ".last-old", ".ckpt-*")


def in_order(dataset: Any, batch_size: int, drop_last: bool, valid_label_columns: list[str] | None = None, **kwargs: Any) -> Any:
    """A trainer's batch sampler: the rows in their order (a step's batch is the rows drawn for it)."""
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import SequentialSampler

    return DefaultBatchSampler(
        SequentialSampler(range(len(dataset))),  # its first argument is the sampler of indices
        batch_size=batch_size,
        drop_last=drop_last,
        valid_label_columns=valid_label_columns,
        **kwargs,  # the generator and seed, unused: nothing is shuffled
    )


def stop_callback(stop: StopFlag, save: bool) -> Any:
    """A trainer callback for Ctrl-C (the :class:`StopFlag`): end training after the current step, with a
    checkpoint where there is a folder (``save``)."""
    from transformers import TrainerCallback

    class StopCallback(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if stop.requested:
                control.should_training_stop = True
                control.should_save = save
            return control

    return StopCallback()


def check_resumable(resume: Path) -> None:
    """Refuse, with the reason, a ``--resume`` folder that is not a trainer's ``checkpoint-<step>`` (a ``last``
    folder of the earlier hand-written loops keeps its model in ``model/`` and its state in files the trainer does
    not read)."""
    if (resume / "model").is_dir() and not (resume / "config.json").is_file():
        raise ValueError(f"{resume} is a checkpoint of the earlier training loop, which the trainer cannot resume: start a new run")
    if not (resume / "trainer_state.json").is_file():
        raise ValueError(f"{resume} is not a training checkpoint (no trainer_state.json): resume from a checkpoint-<step> folder")


def drop_stale_checkpoints(folder: Path, keep: Path | None) -> None:
    """Remove an earlier run's ``checkpoint-*`` folders (but ``keep``) and the old loops' ``last`` checkpoint, with a
    log line for each."""
    if not folder.is_dir():
        return
    stale = [p for pattern in ("checkpoint-*", *OLD_LOOP_CHECKPOINTS) for p in sorted(folder.glob(pattern))]
    for old in stale:
        if old.is_dir() and (keep is None or old.resolve() != keep.resolve()):
            log.info("removing the earlier run's checkpoint %s", old)
            shutil.rmtree(old, ignore_errors=True)


def interrupted(out: Path, global_step: int, saved: bool) -> TrainingInterrupted:
    """The exception for a run stopped at ``global_step``, naming its checkpoint where one was written (``saved``)."""
    folder = out / f"checkpoint-{global_step}"
    return TrainingInterrupted(folder if saved and folder.is_dir() else None)


def recipe_arguments(
    arguments: type,
    config: RetrieverConfig | RerankerConfig,
    out: Path,
    steps: int,
    per_step: int,
    precision: TrainingPrecision,
    device: str,
    checkpoints: bool,
    progress: bool,
) -> Any:
    """A trainer's arguments (``arguments``: the library's training-arguments class) for the recipe both trainers
    share: ``steps`` steps of ``per_step`` rows read in order, AdamW (weight decay 0.01) with a linear warm-up,
    clipping at 1.0, bf16 autocast where chosen, checkpoints in ``out`` every ``checkpoint_every`` steps (with
    ``checkpoints``; the newest kept), no reporting integration."""
    import torch

    return arguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=per_step,
        batch_sampler=in_order,
        learning_rate=config.lr,
        lr_scheduler_type="linear",
        warmup_steps=int(config.warmup_ratio * steps),
        weight_decay=0.01,
        max_grad_norm=1.0,
        bf16=precision is TrainingPrecision.BF16,
        use_cpu=torch.device(device).type == "cpu",
        seed=config.seed,
        save_strategy="steps" if checkpoints and config.checkpoint_every else "no",
        save_steps=config.checkpoint_every or steps,
        save_total_limit=1,
        logging_steps=max(1, steps // 20),
        report_to="none",
        disable_tqdm=not progress,
        dataloader_drop_last=False,
    )
