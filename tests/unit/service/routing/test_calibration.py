"""Router calibration (temperature, per-domain biases) and the router head's files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit

from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from service.routing.router import ROUTER_FILE, HeadRouter, RouterFormatError
from training.calibration import bce_nll, fit_calibration, fit_temperature


def test_temperature_lowers_nll_and_ece_of_an_over_confident_router():
    rng = np.random.default_rng(0)
    n, m = 400, 4
    labels = np.zeros((n, m))
    labels[np.arange(n), rng.integers(0, m, n)] = 1
    # Over-confident: logits of +-8, but the predicted domain is wrong for 30% of the questions.
    predicted = labels.copy()
    wrong = rng.random(n) < 0.3
    predicted[wrong] = np.roll(labels[wrong], 1, axis=1)
    logits = np.where(predicted > 0, 8.0, -8.0)
    cal = fit_temperature(logits, labels)
    assert cal.temperature > 2.0
    assert cal.nll_after < cal.nll_before
    assert cal.ece_after < cal.ece_before
    assert cal.nll_after == pytest.approx(bce_nll(expit(logits / cal.temperature), labels))


def test_temperature_keeps_a_calibrated_router_about_as_is():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, size=(2000, 3))
    labels = (rng.random(z.shape) < expit(z)).astype(float)
    assert fit_temperature(z, labels).temperature == pytest.approx(1.0, abs=0.15)


def _balanced_head_on_skewed_questions(n: int = 600, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Logits of a head trained on balanced domains, on questions where domain 0 is four times as common as
    each other one and the logits alone cannot tell domains 0 and 1 apart for a third of the questions."""
    rng = np.random.default_rng(seed)
    m = 4
    truth = rng.choice(m, size=n, p=[4 / 7, 1 / 7, 1 / 7, 1 / 7])
    labels = np.zeros((n, m))
    labels[np.arange(n), truth] = 1
    logits = np.where(labels > 0, 2.0, -2.0) + rng.normal(0, 1.0, size=(n, m))
    ambiguous = (truth <= 1) & (rng.random(n) < 0.33)
    logits[ambiguous, 0] = logits[ambiguous, 1] = 0.5  # same logit for domains 0 and 1
    return logits, labels


def test_per_domain_biases_give_back_the_prior_odds_and_lower_nll_below_the_temperature_alone():
    logits, labels = _balanced_head_on_skewed_questions()
    t_only = fit_temperature(logits, labels)
    cal = fit_calibration(logits, labels)
    assert cal.bias[0] > max(cal.bias[1:]) + 0.5  # the common domain's prior odds are put back
    assert cal.nll_after < t_only.nll_after
    assert cal.nll_after == pytest.approx(bce_nll(cal.apply(logits), labels))
    # between domains 0 and 1, the common domain now wins the questions whose logits tie
    tie = np.isclose(logits[:, 0], logits[:, 1])
    p = cal.apply(logits[tie])
    assert tie.sum() > 50 and (p[:, 0] > p[:, 1]).all()


def test_a_domain_without_held_out_questions_gets_the_median_bias_not_a_large_negative_one():
    logits, labels = _balanced_head_on_skewed_questions()
    logits = np.concatenate([logits, np.full((len(logits), 1), -2.0)], axis=1)  # domain 4: nobody asked about it
    labels = np.concatenate([labels, np.zeros((len(labels), 1))], axis=1)
    cal = fit_calibration(logits, labels)
    assert cal.bias[4] == pytest.approx(float(np.median(cal.bias[:4])))
    assert fit_temperature(logits, labels).bias == []


def test_head_router_round_trip_independent_sigmoids_and_temperature(tmp_path):
    router = HeadRouter.new(["a", "b", "c"], 8, hidden=0, retriever="base")
    router.temperature = 2.0
    router.fitted = RouterFitted(fusion=FusionParams.paper(0.5))
    v = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    p = router.predict_vectors(v)
    assert p.shape == (5, 3) and not np.allclose(p.sum(axis=1), 1.0)
    assert np.allclose(p, expit(router.raw_logits(v) / 2.0))
    router.save(tmp_path / "r")
    back = HeadRouter.load(tmp_path / "r", version="router-x")
    assert back.retriever == "base" and back.temperature == 2.0 and back.fitted == RouterFitted(fusion=FusionParams.paper(0.5))
    assert np.allclose(back.predict_vectors(v), p)
    router.bias = [1.0, 0.0, -1.0]
    assert np.allclose(router.predict_vectors(v), expit(router.raw_logits(v) / 2.0 + np.array([1.0, 0.0, -1.0])))
    router.save(tmp_path / "r2")
    assert HeadRouter.load(tmp_path / "r2").bias == [1.0, 0.0, -1.0]


def test_fitted_parameters_stored_by_an_earlier_release_load_typed_and_are_written_back_as_they_were(tmp_path):
    """router.json's ``fitted`` as earlier releases wrote it (the fusion parameters before per-domain weights and
    the search breadth, a further fitter's value) reads as typed values and saves to the same JSON."""
    HeadRouter.new(["a", "b"], 4, hidden=0).save(tmp_path / "r")
    old_fusion = {"w_prior": 1.0, "w_best": 2.0, "w_share": 0.5, "bias": -0.1, "sharpness": 1.0, "tau0": 0.3, "unsure": 0.2, "evidence_k": 20}
    stored = {"calibration": {"temperature": 1.5, "questions": 9}, "fusion": old_fusion, "other": {"x": 1}}
    meta = json.loads((tmp_path / "r" / ROUTER_FILE).read_text())
    (tmp_path / "r" / ROUTER_FILE).write_text(json.dumps({**meta, "fitted": stored}))
    back = HeadRouter.load(tmp_path / "r")
    assert back.fitted.fusion == FusionParams(w_prior=1.0, w_best=2.0, w_share=0.5, bias=-0.1, sharpness=1.0, tau0=0.3, unsure=0.2, evidence_k=20)
    assert back.fitted.calibration == stored["calibration"] and back.fitted.extra == {"other": {"x": 1}}
    assert back.fitted.to_json() == {**stored, "fusion": {**old_fusion, "domain_weight": {}, "search_top": 0}}
    back.save(tmp_path / "r2")
    assert HeadRouter.load(tmp_path / "r2").fitted == back.fitted
    (tmp_path / "r" / ROUTER_FILE).write_text(json.dumps({**meta, "fitted": {"fusion": {}}}))
    assert HeadRouter.load(tmp_path / "r").fitted == RouterFitted()  # an empty fusion: not fitted, as fused has read it
    (tmp_path / "r" / ROUTER_FILE).write_text(json.dumps({**meta, "fitted": {"fusion": {"sharpness": 0.5}}}))
    with pytest.raises(RouterFormatError, match="incomplete"):
        HeadRouter.load(tmp_path / "r")
