"""Aggregates: the mean of a metric over questions and its 95% confidence interval.

The interval is a percentile bootstrap (2,000 resamples, fixed seed, so a report is reproducible);
it makes no normality assumption, which matters for 0/1 metrics such as Acc@Top1 on small groups.
Missing values (None: not applicable, or a judge failure) are left out and counted apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

RESAMPLES = 2000
SEED = 0


def mean_ci(values: Sequence[float | None], *, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """``{"mean", "ci95": [lo, hi], "n"}`` over the values that are not None (mean None when there are none)."""
    x = np.array([v for v in values if v is not None], dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return {"mean": None, "ci95": [None, None], "n": 0}
    mean = float(x.mean())
    if n == 1 or float(x.min()) == float(x.max()):
        return {"mean": mean, "ci95": [mean, mean], "n": n}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    means = x[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": mean, "ci95": [float(lo), float(hi)], "n": n}


def group_means(
    rows_by_group: Mapping[str, Sequence[Mapping[str, float | None]]], names: Sequence[str], *, digits: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{group: {metric: {"mean", "ci95", "n"}}}`` of each metric of ``names`` over each group's rows (a row: metric
    name -> value, None or absent: left out), means and bounds rounded to ``digits``; groups in the order given. The
    evaluation's summary and ``benchmarks/quality.py`` both aggregate with it."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for g, rows in rows_by_group.items():
        out[g] = {}
        for m in names:
            agg = mean_ci([r.get(m) for r in rows])
            out[g][m] = {
                "mean": None if agg["mean"] is None else round(agg["mean"], digits),
                "ci95": [None if v is None else round(v, digits) for v in agg["ci95"]],
                "n": agg["n"],
            }
    return out
