"""Router calibration (temperature) and the router head's files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.routing.router import HeadRouter, RouterFormatError
from training.calibration import bce_nll, fit_temperature, sigmoid


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
    assert cal.nll_after == pytest.approx(bce_nll(sigmoid(logits / cal.temperature), labels))


def test_temperature_keeps_a_calibrated_router_about_as_is():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, size=(2000, 3))
    labels = (rng.random(z.shape) < sigmoid(z)).astype(float)
    assert fit_temperature(z, labels).temperature == pytest.approx(1.0, abs=0.15)


def test_head_router_round_trip_independent_sigmoids_and_temperature(tmp_path):
    router = HeadRouter.new(["a", "b", "c"], 8, hidden=0, retriever="base")
    router.temperature = 2.0
    router.fitted["fusion"] = {"sharpness": 0.5}
    v = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    p = router.predict_vectors(v)
    assert p.shape == (5, 3) and not np.allclose(p.sum(axis=1), 1.0)
    assert np.allclose(p, sigmoid(router.raw_logits(v) / 2.0))
    router.save(tmp_path / "r")
    back = HeadRouter.load(tmp_path / "r", version="router-x")
    assert back.retriever == "base" and back.temperature == 2.0 and back.fitted == {"fusion": {"sharpness": 0.5}}
    assert np.allclose(back.predict_vectors(v), p)


def test_an_older_bert_router_is_refused_with_a_message_and_the_service_searches_everything(tmp_path, demo_home):
    old = tmp_path / "router-old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    with pytest.raises(RouterFormatError, match="earlier fedqa release.*fedqa train router"):
        HeadRouter.load(old, version="router-old")

    from service.artifacts import Registry
    from service.loading import load_router

    warnings: list[str] = []
    registry = Registry(demo_home)
    version = registry.active()["router"]
    ok = load_router(registry, version, "base", ["ledger"], warnings)
    assert ok.version == version and not warnings
    other = load_router(registry, version, "retriever-other", ["ledger"], warnings)
    assert other.version is None and "retriever-other" in warnings[0]
