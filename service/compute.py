"""One lock for in-process PyTorch and llama.cpp compute.

On a small CPU machine two such calls at once (torch and llama.cpp, or two torch calls with
their own thread pools) slow each other down many times over, so PyTorch model calls (router,
encoder on its PyTorch fallback, embedded LLM) run under this lock, one model call at a time
(never a whole request). The ONNX Runtime encoder takes no lock: an InferenceSession is
thread-safe and shares one intra-op thread pool between concurrent runs.
"""

from __future__ import annotations

import os
import threading

MODEL_LOCK = threading.RLock()


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity; every CPU where the OS has no affinity call)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def configure_threads(n: int | None) -> None:
    """Set torch's intra-op threads when configured (default: torch's own choice)."""
    if n:
        import torch  # not at module level: the ONNX path (ingest, serving) never needs PyTorch

        torch.set_num_threads(n)
