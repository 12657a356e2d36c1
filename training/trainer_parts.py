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
