"""The retriever's symmetric InfoNCE and the router's BCE, against hand computations (against
sentence-transformers' loss on the real encoder: tests/integration/training/test_training_losses_st.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.losses.symmetric_infonce import positive_mask, symmetric_infonce
from training.router import bce_loss


def _logsumexp(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def test_symmetric_infonce_matches_a_hand_computation_with_two_positives_and_a_hard_negative():
    # 2 queries, 4 passages: q0's gold = {d0, d1}, q1's gold = {d2}; d3 is a hard negative of q1.
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    d = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]])
    tau = 0.5
    s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T / tau
    # s = [[2.0, 1.2, 0.0, 1.6], [0.0, 1.6, 2.0, 1.2]]
    assert s.round(6).tolist() == [[2.0, 1.2, 0.0, 1.6], [0.0, 1.6, 2.0, 1.2]]
    # query -> passage, every passage in the denominator, several positives in the numerator
    l_q0 = -(_logsumexp([2.0, 1.2]) - _logsumexp([2.0, 1.2, 0.0, 1.6]))
    l_q1 = -(2.0 - _logsumexp([0.0, 1.6, 2.0, 1.2]))
    l_q2d = (l_q0 + l_q1) / 2
    # passage -> query, for the passages that are some query's positive (d0, d1, d2); d3 is not an anchor
    l_d0 = -(2.0 - _logsumexp([2.0, 0.0]))
    l_d1 = -(1.2 - _logsumexp([1.2, 1.6]))
    l_d2 = -(2.0 - _logsumexp([0.0, 2.0]))
    l_d2q = (l_d0 + l_d1 + l_d2) / 3
    expected = (l_q2d + l_d2q) / 2

    mask = positive_mask([{"d0", "d1"}, {"d2"}], ["d0", "d1", "d2", "d3"])
    got = symmetric_infonce(torch.tensor(q, dtype=torch.float64), torch.tensor(d, dtype=torch.float64), mask, temperature=tau)
    assert float(got) == pytest.approx(expected, rel=1e-9)
    assert float(got) == pytest.approx(0.50827, abs=1e-4)  # the number itself, worked out once by hand


def test_a_gold_passage_brought_by_another_row_is_not_a_negative():
    q = torch.tensor([[1.0, 0.0], [1.0, 0.1]])
    d = torch.tensor([[1.0, 0.0], [0.9, 0.1]])
    both = positive_mask([{"a", "b"}, {"b"}], ["a", "b"])
    assert both.tolist() == [[True, True], [False, True]]
    loss_multi = symmetric_infonce(q, d, both)
    loss_single = symmetric_infonce(q, d, positive_mask([{"a"}, {"b"}], ["a", "b"]))
    assert float(loss_multi) < float(loss_single)  # q0 is no longer pushed away from its own second gold


def test_loss_rejects_a_query_without_positive():
    with pytest.raises(ValueError, match="positive"):
        symmetric_infonce(torch.ones(2, 3), torch.ones(2, 3), torch.tensor([[True, False], [False, False]]))


def test_loss_has_gradients():
    q = torch.randn(3, 5, requires_grad=True)
    d = torch.randn(4, 5, requires_grad=True)
    loss = symmetric_infonce(q, d, positive_mask([{"a"}, {"b"}, {"c"}], ["a", "b", "c", "x"]))
    loss.backward()
    assert q.grad is not None and d.grad is not None and torch.isfinite(q.grad).all()


def test_router_bce_is_summed_over_domains_and_averaged_over_queries():
    logits = torch.tensor([[2.0, -1.0, 0.0], [0.5, 0.5, -3.0]])
    y = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])

    def bce(z, t):
        p = 1 / (1 + math.exp(-z))
        return -(t * math.log(p) + (1 - t) * math.log(1 - p))

    rows = [sum(bce(float(z), float(t)) for z, t in zip(lz, ly, strict=True)) for lz, ly in zip(logits, y, strict=True)]
    assert float(bce_loss(logits, y)) == pytest.approx(sum(rows) / 2, rel=1e-6)
