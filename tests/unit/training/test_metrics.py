"""router_metrics' precision/recall/F1 (scikit-learn's) against the hand counts they replaced."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from training.metrics import expected_calibration_error, router_metrics


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def hand_router_metrics(probs: np.ndarray, labels: np.ndarray, domains: Sequence[str], threshold: float = 0.5, bins: int = 10) -> dict:
    """router_metrics as it was before scikit-learn counted (frozen copy): F1 as the harmonic mean of the ratios."""
    probs = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64) > 0.5
    n = y.shape[0]
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
        f1 = _f1(precision, recall)
        per_domain[d] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": support,
            "predicted": int(pred[:, j].sum()),
        }
        if support:
            f1s.append(f1)
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
    micro_p = tp_all / (tp_all + fp_all) if tp_all + fp_all else 0.0
    micro_r = tp_all / (tp_all + fn_all) if tp_all + fn_all else 0.0
    if n:
        top = probs.argmax(axis=1)
        correct = y[np.arange(n), top]
        top1, top1_ece = float(correct.mean()), expected_calibration_error(probs[np.arange(n), top], correct.astype(np.float64), bins)
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


def exact_f1s(probs: np.ndarray, labels: np.ndarray, domains: Sequence[str]) -> dict[str, Fraction]:
    """Every F1 of the report as an exact fraction of the counts: 2 tp / (2 tp + fp + fn), 0 with nothing counted."""
    y, pred = np.asarray(labels) > 0.5, np.asarray(probs) >= 0.5

    def f1(tp: int, fp: int, fn: int) -> Fraction:
        return Fraction(2 * tp, 2 * tp + fp + fn) if tp + fp + fn else Fraction(0)

    counts = [(int((p & t).sum()), int((p & ~t).sum()), int((~p & t).sum())) for p, t in zip(pred.T, y.T, strict=True)]
    out = {f"per_domain.{d}.f1": f1(*c) for d, c in zip(domains, counts, strict=True)}
    out["micro_f1"] = f1(*(sum(c[k] for c in counts) for k in range(3)))
    supported = [out[f"per_domain.{d}.f1"] for d, c in zip(domains, counts, strict=True) if c[0] + c[2]]
    out["macro_f1"] = sum(supported, Fraction(0)) / len(supported) if supported else Fraction(0)
    return out


def flat(report: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in report.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def differences(probs: np.ndarray, labels: np.ndarray, domains: Sequence[str]) -> list[str]:
    """The values of the new report that are not the old one's, each asserted to be an F1 whose exact value lies on a
    rounding tie (half a unit of the 4th decimal), where the harmonic mean's last-bit error could round it either way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zero_division is set: no UndefinedMetricWarning for empty classes
        new = flat(router_metrics(probs, labels, domains))
    old = flat(hand_router_metrics(probs, labels, domains))
    assert new.keys() == old.keys()
    exact = exact_f1s(probs, labels, domains)
    found = []
    for key, value in new.items():
        if value == old[key] or (isinstance(value, float) and np.isnan(value) and np.isnan(old[key])):
            continue
        tie = exact[key] * 20000  # an odd integer: the exact F1 is k.5 units of the 4th decimal
        assert tie.denominator == 1 and tie.numerator % 2 == 1, (key, value, old[key], exact[key])
        assert abs(value - old[key]) == pytest.approx(1e-4) and abs(value - float(exact[key])) <= 5e-5 + 1e-12
        found.append(key)
    return found


def test_router_metrics_are_the_hand_counts_on_random_multilabel_data_with_empty_classes():
    """Every value identical, but for an F1 on an exact rounding tie (6 of about 22,000 F1s in a 4,000-report run)."""
    rng = np.random.default_rng(52)
    for n in [0, 1, 2, 5, 17, 64, 100, 250]:
        for m in [1, 2, 3, 6]:
            for _ in range(6):
                domains = [f"d{j}" for j in range(m)]
                labels = rng.random((n, m)) < rng.uniform(0.0, 0.6, m)
                probs = rng.random((n, m)) * rng.uniform(0.3, 1.5, m)
                if m > 1:
                    labels[:, rng.integers(m)] = False  # a domain no question belongs to
                    probs[:, rng.integers(m)] = 0.1  # a domain never predicted
                differences(probs, labels.astype(int), domains)


def test_an_f1_on_a_rounding_tie_is_rounded_from_its_exact_value():
    """tp 9, fp 11, fn 35: F1 = 18/64 = 0.28125 exactly; the harmonic mean of 9/20 and 9/44 gave 0.28125000000000006
    (0.2813), scikit-learn's 2 tp / (2 tp + fp + fn) gives 0.28125, which rounds half to even (0.2812)."""
    labels = np.array([1] * 9 + [0] * 11 + [1] * 35 + [0] * 5)[:, None]
    probs = np.array([0.9] * 20 + [0.1] * 40)[:, None]
    assert differences(probs, labels, ["d"]) == ["per_domain.d.f1", "micro_f1", "macro_f1"]
    report = router_metrics(probs, labels, ["d"])
    assert report["per_domain"]["d"] == {"precision": 0.45, "recall": 0.2045, "f1": 0.2812, "support": 44, "predicted": 20}


def test_no_question_and_no_positive():
    empty = router_metrics(np.zeros((0, 3)), np.zeros((0, 3)), ["a", "b", "c"])
    assert empty["per_domain"]["a"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0, "predicted": 0}
    assert empty["micro_f1"] == empty["macro_f1"] == 0.0 and empty["queries"] == 0
    none = router_metrics(np.full((4, 2), 0.2), np.zeros((4, 2)), ["a", "b"])
    assert none["micro_precision"] == none["micro_recall"] == none["macro_f1"] == 0.0
