"""Which questions a router's calibration and fused parameters are fitted on.

Normally the validation split. A split with only a few questions of some product cannot fit a temperature,
per-domain biases or the fused strategy's parameters (four questions fit a temperature of 0.05 and make the
router fall back on every question), so then every labelled question is scored out of fold instead: k heads,
each trained without one fold of the labelled questions, give the logits of that fold.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from service.queries import LabelledQuery

if TYPE_CHECKING:
    from training.checkpoint import StopFlag
    from training.router import RouterConfig

log = logging.getLogger("fedqa.training.router")


def thin_domains(val: Sequence[LabelledQuery], domains: Sequence[str], min_per_domain: int) -> list[str]:
    """The domains with fewer than ``min_per_domain`` in-scope validation questions."""
    counts = Counter(d for q in val for d in q.domains)
    return [d for d in domains if counts[d] < min_per_domain]


def small_split_warning(val: Sequence[LabelledQuery], thin: Sequence[str], min_per_domain: int, labelled: int, folds: int) -> str:
    """What ``train router`` says (and logs) when the validation split is too small to fit on."""
    folds = min(folds, labelled)
    message = (
        f"the validation split ({len(val)} questions) has fewer than {min_per_domain} questions of {', '.join(thin)}: "
        f"too few to fit the calibration and the fused strategy's parameters; fitting them out of fold ({folds}-fold) "
        f"over all {labelled} labelled questions instead"
    )
    log.warning(message)
    return message


def out_of_fold_logits(
    vectors: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    labelled: Sequence[int],
    domains: Sequence[str],
    cfg: RouterConfig,
    *,
    retriever: str | None,
    stop: StopFlag | None = None,
) -> np.ndarray:
    """Raw logits of the ``labelled`` rows, each from a head trained without that row's fold (the other rows,
    synthetic ones included, always train); rows in the order of ``labelled``."""
    from training.router import train_head

    folds = min(cfg.kfold, len(labelled))
    order = np.random.default_rng(cfg.seed).permutation(np.asarray(labelled, dtype=np.int64))
    position = {int(i): n for n, i in enumerate(labelled)}
    out = np.zeros((len(labelled), len(domains)), dtype=np.float64)
    for f in range(folds):
        held = order[f::folds]
        keep = np.ones(len(vectors), dtype=bool)
        keep[held] = False
        head = train_head(vectors[keep], labels[keep], weights[keep], domains, cfg, retriever=retriever, stop=stop)
        for row, i in zip(head.raw_logits(vectors[held]), held, strict=True):
            out[position[int(i)]] = row
    log.info("scored %d labelled questions out of fold (%d folds)", len(labelled), folds)
    return out
