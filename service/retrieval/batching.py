"""Texts embedded in batches of similar length, one batch per core: the loop both bulk encoders share.

Independent batches keep every core busy, where one batch on a shared thread pool waits at each op for its
slowest thread (a loaded machine, a short batch); sorting by length leaves almost no padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def unit_rows(vecs: np.ndarray) -> np.ndarray:
    """``vecs`` with every row scaled to unit length (a zero row stays zero)."""
    return vecs / np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)


def by_length(
    lengths: Sequence[int],
    *,
    batch_size: int,
    threads: int,
    dim: int,
    run: Callable[[np.ndarray], np.ndarray],
    name: str,
    bar=None,  # noqa: ANN001 - a tqdm bar
) -> np.ndarray:
    """Rows ``run(indices)`` of batches of indices taken in descending ``lengths``, back in input order.

    With one batch or one thread everything runs in the caller's thread; otherwise ``threads`` workers
    (named ``name``) run a batch each.
    """
    order = np.argsort([-n for n in lengths], kind="stable")
    batches = [order[start : start + batch_size] for start in range(0, len(lengths), batch_size)]
    out = np.empty((len(lengths), dim), dtype=np.float32)
    if len(batches) <= 1 or threads <= 1:
        done = ((idx, run(idx)) for idx in batches)
        return _collect(out, done, bar)
    with ThreadPoolExecutor(threads, thread_name_prefix=name) as workers:
        return _collect(out, zip(batches, workers.map(run, batches), strict=True), bar)


def _collect(out: np.ndarray, done, bar) -> np.ndarray:  # noqa: ANN001
    for idx, vecs in done:
        out[idx] = vecs
        if bar is not None:
            bar.update(len(idx))
    return out
