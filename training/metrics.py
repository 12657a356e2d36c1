"""Metrics of the router: multi-label routing and calibration.

Plain numpy over plain data, so the same functions serve training reports, the CLI and tests. Ranked retrieval's
metrics are :mod:`service.evaluation.retrieval_metrics`' (``ranking_means``), shared with evaluation and benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """ECE of binary predictions: sum over equal-width bins of |mean p - share of positives| * share of items.

    ``probs`` and ``labels`` have the same shape (any), labels 0/1. 0 is perfectly calibrated.
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if p.size == 0:
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1], right=True), 0, bins - 1)
    ece = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            ece += sel.mean() * abs(p[sel].mean() - y[sel].mean())
    return float(ece)


def router_metrics(probs: np.ndarray, labels: np.ndarray, domains: Sequence[str], *, threshold: float = 0.5, bins: int = 10) -> dict:
    """Multi-label routing quality of independent per-domain probabilities.

    ``probs`` (n, m) router outputs; ``labels`` (n, m) multi-hot gold domains. A domain is predicted
    when its probability is >= ``threshold``. Returns per-domain precision/recall/F1/support,
    micro and macro F1, top-1 domain accuracy (the most probable domain is a gold one), the ECE of
    the per-domain probabilities (``ece``) and of the top-1 confidence (``top1_ece``).
    """
    probs = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64) > 0.5
    n, m = y.shape
    pred = probs >= threshold
    per_domain: dict[str, dict] = {}
    tp_all = fp_all = fn_all = 0
    f1s = []
    for j, d in enumerate(domains):
        tp = int(np.sum(pred[:, j] & y[:, j]))
        fp = int(np.sum(pred[:, j] & ~y[:, j]))
        fn = int(np.sum(~pred[:, j] & y[:, j]))
        support = int(y[:, j].sum())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        per_domain[d] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(_f1(precision, recall), 4),
            "support": support,
            "predicted": int(pred[:, j].sum()),
        }
        if support:  # macro F1 over domains that occur in the gold labels
            f1s.append(_f1(precision, recall))
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
    micro_p = tp_all / (tp_all + fp_all) if tp_all + fp_all else 0.0
    micro_r = tp_all / (tp_all + fn_all) if tp_all + fn_all else 0.0
    if n:
        top = probs.argmax(axis=1)
        correct = y[np.arange(n), top]
        top1 = float(correct.mean())
        top1_ece = expected_calibration_error(probs[np.arange(n), top], correct.astype(np.float64), bins)
    else:
        top1, top1_ece = float("nan"), float("nan")
    return {
        "queries": n,
        "threshold": threshold,
        "per_domain": per_domain,
        "micro_precision": round(micro_p, 4),
        "micro_recall": round(micro_r, 4),
        "micro_f1": round(_f1(micro_p, micro_r), 4),
        "macro_f1": round(float(np.mean(f1s)) if f1s else 0.0, 4),
        "top1_accuracy": round(top1, 4),
        "ece": round(expected_calibration_error(probs, y, bins), 4),
        "top1_ece": round(top1_ece, 4),
        "ece_bins": bins,
    }
