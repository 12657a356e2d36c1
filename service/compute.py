"""One lock for in-process model compute.

On a small CPU machine two model calls at once (torch and llama.cpp, or two torch calls
with their own thread pools) slow each other down many times over, so every in-process
model call (router, encoder, embedded LLM) runs under this lock.
"""

from __future__ import annotations

import threading

import torch

MODEL_LOCK = threading.RLock()


def configure_threads(n: int | None) -> None:
    """Set torch's intra-op threads when configured (default: torch's own choice)."""
    if n:
        torch.set_num_threads(n)
