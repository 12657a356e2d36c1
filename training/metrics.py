"""Metrics of the router: multi-label routing and calibration.

Plain numpy and scikit-learn's precision/recall/F1 over plain data, so the same functions serve training reports,
the CLI and tests. Ranked retrieval's metrics are :mod:`service.evaluation.retrieval_metrics`' (``ranking_means``),
shared with evaluation and benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import precision_recall_fscore_support


def _prf(y: np.ndarray, pred: np.ndarray, average: str | None) -> tuple:
    """scikit-learn's precision, recall, F1 and support of ``pred`` against multi-hot ``y`` (n, m booleans), per
    domain (``average=None``) or pooled (``"micro"``); 0 where a ratio has nothing to count."""
    n, m = y.shape
    if n == 0:  # scikit-learn wants a sample; with none, nothing is predicted and nothing is to be found
        return (np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m, dtype=int)) if average is None else (0.0, 0.0, 0.0, None)
    # one domain's labels are a binary target to scikit-learn (not a multi-label matrix): the domain is its class 1
    labels = [1] if m == 1 else None
    return precision_recall_fscore_support(y.astype(int), pred.astype(int), labels=labels, average=average, zero_division=0.0)


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
    precision, recall, f1, support = _prf(y, pred, None)
    per_domain = {
        d: {
            "precision": round(float(precision[j]), 4),
            "recall": round(float(recall[j]), 4),
            "f1": round(float(f1[j]), 4),
            "support": int(support[j]),
            "predicted": int(pred[:, j].sum()),
        }
        for j, d in enumerate(domains)
    }
    micro_p, micro_r, micro_f1, _ = _prf(y, pred, "micro")
    supported = support > 0  # macro F1 over domains that occur in the gold labels
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
        "micro_precision": round(float(micro_p), 4),
        "micro_recall": round(float(micro_r), 4),
        "micro_f1": round(float(micro_f1), 4),
        "macro_f1": round(float(np.mean(f1[supported])) if supported.any() else 0.0, 4),
        "top1_accuracy": round(top1, 4),
        "ece": round(expected_calibration_error(probs, y, bins), 4),
        "top1_ece": round(top1_ece, 4),
        "ece_bins": bins,
    }
