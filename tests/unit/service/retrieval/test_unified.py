"""The unified score and its order (service/retrieval/unified.py): the array forms agree with each other and with the
merge, candidate for candidate (the fits' side against the served merge on real questions:
tests/integration/retrieval/test_unified.py)."""

from __future__ import annotations

import math

import numpy as np

from service.retrieval.federated import merge
from service.retrieval.passage import Hit, point_id
from service.retrieval.unified import (
    ahead,
    demotion,
    first,
    merge_weights,
    positive,
    positive_similarity,
    rank_order,
    ranking,
    tie_ranks,
    unified_scores,
)


def test_s_plus_is_one_clip_for_one_candidate_and_for_arrays():
    s = [-0.3, -0.0, 0.0, 1e-12, 0.42, 1.0, float("nan")]
    assert positive(s).tolist() == [positive_similarity(x) for x in s] == [0.0, 0.0, 0.0, 1e-12, 0.42, 1.0, 0.0]


def test_the_order_is_by_u_then_s_then_point_id_then_domain():
    rng = np.random.default_rng(3)
    n = 200
    s = np.round(rng.uniform(-0.2, 0.9, n), 1)  # coarse: many equal s
    w = rng.choice([0.5, 1.0, -np.inf], n, p=[0.45, 0.45, 0.1])
    ids = [f"p{int(i)}" for i in rng.integers(0, 40, n)]  # the same point id in several domains
    doms = [f"d{int(j)}" for j in rng.integers(0, 3, n)]
    u = unified_scores(w, s)
    order = ranking(u, tie_ranks(s, ids, doms)).tolist()
    ranked = [i for i in range(n) if math.isfinite(u[i])]  # a dropped domain's candidates (w -inf) do not rank
    assert len(ranked) < n
    assert order == sorted(ranked, key=lambda i: (-u[i], -s[i], ids[i], doms[i], i))
    assert rank_order(u.tolist(), s.tolist(), ids, doms) == order  # the merge's one-sort form
    tie = tie_ranks(s, ids, doms)
    for a, b in zip(order, order[1:], strict=False):  # ahead says what ranking does, pair by pair
        assert ahead(u[a], tie[a], u[b], tie[b]) and not ahead(u[b], tie[b], u[a], tie[a])
    col, found = first(u[None, :], tie[None, :], np.isfinite(u)[None, :])
    assert found.tolist() == [True] and col.tolist() == [order[0]]


def test_merge_weights_drop_the_gated_domains_and_weigh_every_domain_1_when_unsure():
    power = np.array([[0.9, 0.2, 0.5], [0.3, 0.3, 0.1]])
    active = np.array([[True, False, True], [False, True, True]])
    w = merge_weights(power, np.array([[False], [True]]), active)
    assert w.tolist() == [[0.9, -np.inf, 0.5], [1.0, 1.0, 1.0]]
    u = unified_scores(w[0], [0.0, 0.8, 0.7])
    assert ranking(u, np.arange(3)).tolist() == [2, 0]  # the dropped domain's hit is not ranked, even at s+ 0


def test_the_merge_ranks_by_the_unified_score_with_the_bonus():
    rng = np.random.default_rng(8)
    probs = {"a": 0.9, "b": 0.55, "c": 0.2}
    per = {d: [Hit(point_id(f"{d}{i}"), float(np.round(rng.uniform(-0.1, 0.8), 2))) for i in range(12)] for d in probs}
    bonus = {point_id(f"{d}{i}"): 0.05 * i - float(demotion(0.3, 0.9, 0.5)) for d in probs for i in range(0, 12, 4)}
    rows = [(d, h) for d, hs in per.items() for h in hs]
    u = unified_scores([probs[d] for d, _ in rows], [h.score for _, h in rows], [bonus.get(h.point_id, 0.0) for _, h in rows])
    tie = tie_ranks([h.score for _, h in rows], [h.point_id for _, h in rows], [d for d, _ in rows])
    expected = [(rows[i][0], rows[i][1].point_id, float(u[i])) for i in ranking(u, tie)[:10]]
    assert [(c.domain, c.point_id, c.unified_score) for c in merge(per, probs, 10, bonus)] == expected


def test_the_merge_cuts_each_domain_at_top_k_in_the_tie_order():
    """Equal s within a domain: the point id decides which reaches the top k, as in the full ranking (and the fit's
    candidates), whatever order the search returned them in."""
    late, early = sorted([point_id("dup-1"), point_id("dup-2")], reverse=True)
    per = {"a": [Hit(late, 0.7), Hit(early, 0.7), Hit(point_id("low"), 0.2)], "b": [Hit(point_id("b0"), 0.5)]}
    full = merge(per, {"a": 1.0, "b": 1.0}, 10)
    assert [c.point_id for c in merge(per, {"a": 1.0, "b": 1.0}, 1)] == [c.point_id for c in full[:1]] == [early]
