"""A clean stop on Ctrl-C for the training runs.

The first Ctrl-C asks the run to stop after the current step: it writes a checkpoint and raises
:class:`TrainingInterrupted` (the active versions are untouched). A second Ctrl-C aborts at once, keeping the
last checkpoint written before. The checkpoints themselves are sentence-transformers' trainers'
``checkpoint-<step>`` folders (:mod:`training.trainer_parts` holds the callback that reads the :class:`StopFlag`).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("fedqa.training")


class TrainingInterrupted(RuntimeError):
    """Training stopped on request; ``checkpoint`` is the last complete checkpoint (or None)."""

    def __init__(self, checkpoint: Path | None) -> None:
        where = f"; last checkpoint: {checkpoint} (resume with --resume {checkpoint})" if checkpoint else ""
        super().__init__(f"training interrupted{where}; the active versions are unchanged")
        self.checkpoint = checkpoint


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
