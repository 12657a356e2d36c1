"""Temperature scaling of the router's logits, fitted on held-out questions.

p_j = sigmoid(z_j / T): one temperature for all domains (the validation split is small; a per-domain
Platt scaling would fit 2m parameters on a few dozen questions). T is chosen to minimise the
binary cross-entropy (NLL) of the held-out labels; T > 1 softens an over-confident router.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from training.metrics import expected_calibration_error


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Elementwise logistic function."""
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))


def bce_nll(probs: np.ndarray, labels: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy over every (question, domain) pair."""
    p = np.clip(np.asarray(probs, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(labels, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


@dataclass(frozen=True)
class Calibration:
    """A fitted temperature with the held-out NLL and ECE before and after it."""

    temperature: float
    questions: int
    nll_before: float
    nll_after: float
    ece_before: float
    ece_after: float

    def as_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def fit_temperature(logits: np.ndarray, labels: np.ndarray, *, bounds: tuple[float, float] = (0.05, 20.0)) -> Calibration:
    """The temperature minimising held-out NLL (bounded 1-D search over log T).

    ``logits`` (n, m) raw router logits; ``labels`` (n, m) multi-hot (all zeros for an out-of-scope
    question). With no held-out questions T = 1.
    """
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    before = sigmoid(z)
    if z.size == 0:
        return Calibration(1.0, 0, float("nan"), float("nan"), float("nan"), float("nan"))
    res = minimize_scalar(
        lambda log_t: bce_nll(sigmoid(z / np.exp(log_t)), y), bounds=(np.log(bounds[0]), np.log(bounds[1])), method="bounded"
    )
    t = float(np.exp(res.x))
    after = sigmoid(z / t)
    return Calibration(
        temperature=t,
        questions=int(z.shape[0]),
        nll_before=bce_nll(before, y),
        nll_after=bce_nll(after, y),
        ece_before=expected_calibration_error(before, y),
        ece_after=expected_calibration_error(after, y),
    )
