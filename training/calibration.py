"""Calibration of the router's logits, fitted on held-out questions.

p_j = sigmoid(z_j / T + b_j): one temperature T for all domains and a per-domain bias b_j (a Platt scaling
whose slope is shared: the validation split is small, so 2m free parameters would over-fit a few dozen
questions). T and b minimise the binary cross-entropy (NLL) of the held-out labels plus a Gaussian prior
b_j ~ N(0, prior_sd^2) on the biases, so a bias moves away from 0 only as far as the held-out questions
support it.

Why a bias per domain: the head is trained with every domain weighted equally (so that a product with few
or no expert questions is still learnt), which removes the products' prior odds; real questions are not
balanced (faq6: perl and python FAQ questions outnumber git and sqlite ones many times). The bias puts the
prior odds of the held-out questions back, so that p_j is P(domain j | question) for questions as they
come. A domain with no positive held-out question has no evidence for its prior: it gets the median bias
of the others (not a large negative one), so a product nobody asked about yet is not ruled out.
``fit_temperature`` is the temperature alone (all biases 0).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from training.metrics import expected_calibration_error

PRIOR_SD = 2.0  # of the per-domain biases, in logit units: prior odds up to about e^4 need little evidence


def bce_nll(probs: np.ndarray, labels: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy over every (question, domain) pair."""
    p = np.clip(np.asarray(probs, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(labels, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


@dataclass(frozen=True)
class Calibration:
    """A fitted temperature and per-domain biases, with the held-out NLL and ECE before and after them."""

    temperature: float
    questions: int
    nll_before: float
    nll_after: float
    ece_before: float
    ece_after: float
    bias: list[float] = field(default_factory=list)  # per domain, in the router's domain order ([]: all 0)
    prior_sd: float | None = None

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated probabilities of raw logits (n, m)."""
        z = np.asarray(logits, dtype=np.float64) / self.temperature
        return expit(z + np.asarray(self.bias, dtype=np.float64) if self.bias else z)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["bias"] = [round(b, 6) for b in self.bias]
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def _biases(free: np.ndarray, has_pos: np.ndarray) -> np.ndarray:
    """Every domain's bias: the free ones where the domain has positives, their median elsewhere."""
    b = np.zeros(has_pos.shape[0], dtype=np.float64)
    b[has_pos] = free
    if (~has_pos).any():
        b[~has_pos] = float(np.median(free)) if free.size else 0.0
    return b


def fit_calibration(
    logits: np.ndarray,
    labels: np.ndarray,
    *,
    per_domain_bias: bool = True,
    prior_sd: float = PRIOR_SD,
    bounds: tuple[float, float] = (0.05, 20.0),
) -> Calibration:
    """The temperature (and, with ``per_domain_bias``, the biases) minimising held-out NLL + the bias prior.

    ``logits`` (n, m) raw router logits; ``labels`` (n, m) multi-hot (all zeros for an out-of-scope
    question). With no held-out questions T = 1 and every bias 0.
    """
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if z.size == 0:
        nan = float("nan")
        return Calibration(1.0, 0, nan, nan, nan, nan, [], prior_sd if per_domain_bias else None)
    has_pos: np.ndarray = np.asarray((y > 0).any(axis=0)) if per_domain_bias else np.zeros(z.shape[1], dtype=bool)
    n_free = int(has_pos.sum())

    def objective(theta: np.ndarray) -> float:
        t = float(np.exp(np.clip(theta[0], np.log(bounds[0]), np.log(bounds[1]))))
        b = _biases(theta[1:], has_pos)
        u = z / t + b
        nll = float((np.logaddexp(0.0, u) - y * u).sum())
        return nll + float((theta[1:] ** 2).sum()) / (2 * prior_sd**2)

    res = minimize(objective, np.zeros(1 + n_free), method="L-BFGS-B", bounds=[(np.log(bounds[0]), np.log(bounds[1]))] + [(None, None)] * n_free)
    t = float(np.exp(res.x[0]))
    bias = [float(v) for v in _biases(res.x[1:], has_pos)] if per_domain_bias else []
    cal = Calibration(t, int(z.shape[0]), 0.0, 0.0, 0.0, 0.0, bias, prior_sd if per_domain_bias else None)
    before, after = expit(z), cal.apply(z)
    return Calibration(
        temperature=t,
        questions=int(z.shape[0]),
        nll_before=bce_nll(before, y),
        nll_after=bce_nll(after, y),
        ece_before=expected_calibration_error(before, y),
        ece_after=expected_calibration_error(after, y),
        bias=bias,
        prior_sd=cal.prior_sd,
    )


def fit_temperature(logits: np.ndarray, labels: np.ndarray, *, bounds: tuple[float, float] = (0.05, 20.0)) -> Calibration:
    """The temperature alone (every bias 0) minimising held-out NLL."""
    return fit_calibration(logits, labels, per_domain_bias=False, bounds=bounds)
