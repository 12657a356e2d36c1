"""The stochastic gate: threshold formula, sampling frequencies, seeds, fallback."""

import math

import numpy as np
import pytest

from service.routing.gate import activation_probabilities, gate, normalized_entropy, threshold


def test_threshold_uniform_probabilities_is_zero():
    # H(p) = log m for a uniform p, so tau = tau0 * (1 - 1) = 0 and every domain is certain.
    p = np.array([0.3, 0.3, 0.3])
    assert threshold(p, 0.5) == pytest.approx(0.0, abs=1e-12)
    assert activation_probabilities(p, 0.0).tolist() == [1.0, 1.0, 1.0]


def test_threshold_one_hot_is_tau0():
    assert threshold(np.array([1.0, 0.0, 0.0, 0.0]), 0.6) == pytest.approx(0.6)


def test_threshold_hand_computed_two_domains():
    # p = (0.8, 0.2): H = -(0.8 ln 0.8 + 0.2 ln 0.2) = 0.500402; / ln 2 = 0.721928
    p = np.array([0.8, 0.2])
    h = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2)) / math.log(2)
    assert normalized_entropy(p) == pytest.approx(0.721928, abs=1e-6)
    assert threshold(p, 0.5) == pytest.approx(0.5 * (1 - h))
    assert threshold(p, 0.5) == pytest.approx(0.139036, abs=1e-6)


def test_threshold_normalises_sigmoid_outputs():
    # Independent sigmoid outputs need not sum to 1; the entropy is taken of p / sum(p).
    # p = (0.9, 0.45, 0.15) -> q = (0.6, 0.3, 0.1); H = 0.897946; / ln 3 = 0.817345
    p = np.array([0.9, 0.45, 0.15])
    assert normalized_entropy(p) == pytest.approx(0.817345, abs=1e-6)
    assert threshold(p, 0.4) == pytest.approx(0.4 * (1 - 0.817345), abs=1e-6)


def test_activation_probability_is_capped_at_one():
    act = activation_probabilities(np.array([0.9, 0.05, 0.01]), 0.1)
    assert act.tolist() == pytest.approx([1.0, 0.5, 0.1])


def test_sampling_frequency_matches_min_one_p_over_tau():
    p = np.array([0.7, 0.2, 0.1, 0.05])
    tau = threshold(p, 0.8)
    expected = np.minimum(1.0, p / tau)
    assert 0 < expected[-1] < 1 and expected[0] == 1.0  # a case with both certain and uncertain domains
    rng = np.random.default_rng(123)
    n = 20000
    counts = np.zeros(p.size)
    for _ in range(n):
        d = gate(p, 0.8, rng=rng)
        if not d.fallback:
            counts += d.active
    freq = counts / n
    # 4 standard errors of a Bernoulli mean at n = 20000 is at most 0.0142
    assert np.allclose(freq, expected, atol=0.015), (freq, expected)


def test_same_seed_same_draws_and_different_seeds_differ():
    p = np.array([0.9, 0.3, 0.2, 0.1, 0.05])  # activations (1, 1, 0.84, 0.42, 0.21) at tau0 = 0.9
    act = gate(p, 0.9, rng=np.random.default_rng(0)).activation
    assert act == pytest.approx([1.0, 1.0, 0.843284, 0.421642, 0.210821], abs=1e-6)
    assert ((act > 0) & (act < 1)).sum() == 3  # three domains whose draw depends on the seed
    draws = lambda seed: [tuple(gate(p, 0.9, rng=np.random.default_rng(seed + i)).active) for i in range(50)]  # noqa: E731
    assert draws(7) == draws(7)
    assert draws(7) != draws(1000)
    assert len(set(draws(7))) > 2  # the draws vary from seed to seed: the seed is used, not a fixed outcome
    # The same seed gives the same draw each time, though the generator is created anew for each call.
    for seed in range(20):
        once = gate(p, 0.9, rng=np.random.default_rng(seed)).active.tolist()
        assert all(gate(p, 0.9, rng=np.random.default_rng(seed)).active.tolist() == once for _ in range(3))
        assert once[:2] == [True, True]  # certain domains are always drawn


def test_argmax_fallback_when_nothing_is_drawn():
    # Low, peaked probabilities: every domain's draw can fail, so some seeds draw none.
    p = np.array([0.02, 0.01, 0.001])
    tau = threshold(p, 1.0)
    act = activation_probabilities(p, tau)
    assert (act < 1).all()  # every draw can fail
    seen_fallback = False
    for seed in range(200):
        d = gate(p, 1.0, rng=np.random.default_rng(seed))
        assert d.active.sum() >= 1
        if d.fallback:
            seen_fallback = True
            assert d.active.tolist() == [True, False, False]
    assert seen_fallback


def test_deterministic_mode_is_reproducible_and_uses_half_threshold():
    # p = (0.9, 0.3, 0.05), tau0 = 0.5: q = p / 1.25 = (0.72, 0.24, 0.04); H / ln 3 = 0.644255;
    # tau = 0.5 * (1 - 0.644255) = 0.177873; activations min(1, p / tau) = (1, 1, 0.281100).
    p = np.array([0.9, 0.3, 0.05])
    d1 = gate(p, 0.5, mode="deterministic")
    d2 = gate(p, 0.5, mode="deterministic")
    assert d1.active.tolist() == d2.active.tolist() == [True, True, False]
    assert d1.activation == pytest.approx([1.0, 1.0, 0.281100], abs=1e-5)
    # p = (0.8, 0.5, 0.1, 0.05), tau0 = 0.6: H / ln 4 = 0.718313, tau = 0.169012; activations
    # (1, 1, 0.591674, 0.295837): an uncertain domain above one half is searched, one below is not.
    d = gate(np.array([0.8, 0.5, 0.1, 0.05]), 0.6, mode="deterministic")
    assert d.activation == pytest.approx([1.0, 1.0, 0.591674, 0.295837], abs=1e-5)
    assert d.active.tolist() == [True, True, True, False] and not d.fallback
    # No randomness: any generator gives the same set.
    assert all(gate(p, 0.5, mode="deterministic", rng=np.random.default_rng(s)).active.tolist() == [True, True, False] for s in range(10))


def test_empty_probabilities_rejected():
    with pytest.raises(ValueError):
        gate(np.array([]), 0.5)
