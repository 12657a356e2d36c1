"""Checkpoints and a clean stop on Ctrl-C for the training loops.

The first Ctrl-C asks the loop to stop after the current step: it writes a checkpoint and raises
:class:`TrainingInterrupted` (the active versions are untouched). A second Ctrl-C aborts at once,
keeping the last checkpoint written before. Checkpoints are written to a temporary folder and
renamed into place, so ``<dir>/last`` is always a complete checkpoint.

The retriever's loop writes and reads these checkpoints; the reranker, trained by sentence-transformers'
``CrossEncoderTrainer``, uses only :class:`StopFlag` and :class:`TrainingInterrupted` here (its checkpoints are the
trainer's ``checkpoint-<step>`` folders, whose ``trainer_state.json`` :func:`load_checkpoint_state` also reads).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("fedqa.training")
STATE = "trainer_state.json"


class TrainingInterrupted(RuntimeError):
    """Training stopped on request; ``checkpoint`` is the last complete checkpoint (or None)."""

    def __init__(self, checkpoint: Path | None) -> None:
        where = f"; last checkpoint: {checkpoint} (resume with --resume {checkpoint})" if checkpoint else ""
        super().__init__(f"training interrupted{where}; the active versions are unchanged")
        self.checkpoint = checkpoint


class CheckpointError(ValueError):
    """A checkpoint file holds more than tensors and plain values (or is not a torch file): not loaded."""


class StopFlag:
    """Set by Ctrl-C (inside :meth:`catch_sigint`) or by code (tests, callbacks)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self._event.is_set()

    def request(self) -> None:
        """Ask the loop to stop after its current step."""
        self._event.set()

    def catch_sigint(self) -> _SigintScope:
        """A context in which the first Ctrl-C requests a stop and a second one aborts."""
        return _SigintScope(self)


class _SigintScope:
    def __init__(self, flag: StopFlag) -> None:
        self.flag = flag
        self._previous: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.flag.requested:
            raise KeyboardInterrupt
        self.flag.request()
        log.warning("Ctrl-C: stopping after this step and saving a checkpoint (Ctrl-C again to abort now)")

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self.flag

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def save_checkpoint(folder: Path, save_model: Callable[[Path], None], state: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write ``folder/last`` atomically: the model (by ``save_model``), ``trainer_state.json`` and extra torch objects."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ckpt-", dir=folder))
    last, old = folder / "last", folder / ".last-old"
    try:
        save_model(tmp / "model")
        for name, obj in (extra or {}).items():
            torch.save(obj, tmp / f"{name}.pt")
        (tmp / STATE).write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
        shutil.rmtree(old, ignore_errors=True)
        if last.exists():
            os.replace(last, old)
        os.replace(tmp, last)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not last.exists() and old.exists():
            os.replace(old, last)  # interrupted between the two renames: keep the previous checkpoint
        raise
    return last


def load_checkpoint_state(path: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint folder (``.../last``)."""
    f = Path(path) / STATE
    if not f.is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no {STATE})")
    return json.loads(f.read_text(encoding="utf-8"))


def load_extra(path: Path, name: str) -> Any:
    """A torch object saved beside a checkpoint's model (optimizer, scheduler, random state), or None.

    Read with ``weights_only=True``: tensors and plain containers only, so a crafted file cannot run code
    (:class:`CheckpointError` naming the file instead)."""
    import pickle

    import torch

    f = Path(path) / f"{name}.pt"
    if not f.is_file():
        return None
    try:
        return torch.load(f, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        reason = " ".join(str(exc).split()).split(" Check the documentation")[0]
        raise CheckpointError(f"{f}: not a checkpoint fedqa wrote (only tensors and plain values are loaded): {reason}") from None
