"""Merging per-domain results by U = p_j * s."""

from service.retrieval.federated import Candidate, merge
from service.retrieval.passage import Hit, point_id

_DOCS: dict[str, str] = {}  # point id -> doc_id of the hits made below


def _hit(doc_id: str, domain: str, score: float) -> Hit:
    _DOCS[point_id(doc_id)] = doc_id
    return Hit(point_id(doc_id), score)


def _doc(c: Candidate) -> str:
    return _DOCS[c.point_id]


def test_unified_score_orders_across_domains():
    per = {
        "orbit": [_hit("o1", "orbit", 0.90), _hit("o2", "orbit", 0.50)],
        "ledger": [_hit("l1", "ledger", 0.60), _hit("l2", "ledger", 0.55)],
    }
    probs = {"orbit": 0.5, "ledger": 0.9}
    ranked = merge(per, probs, top_k=4)
    # U: o1 0.45, o2 0.25, l1 0.54, l2 0.495
    assert [_doc(r) for r in ranked] == ["l1", "l2", "o1", "o2"]
    assert [round(r.unified_score, 3) for r in ranked] == [0.54, 0.495, 0.45, 0.25]
    assert all(r.unified_score == r.domain_prob * r.score for r in ranked)


def test_raw_score_alone_would_order_differently():
    per = {"a": [_hit("a1", "a", 0.8)], "b": [_hit("b1", "b", 0.7)]}
    assert _doc(merge(per, {"a": 0.5, "b": 1.0}, 2)[0]) == "b1"
    assert _doc(merge(per, {"a": 1.0, "b": 1.0}, 2)[0]) == "a1"


def test_top_k_cut_and_ties_are_deterministic():
    per = {"a": [_hit("a2", "a", 0.5), _hit("a1", "a", 0.5)], "b": [_hit("b1", "b", 0.5)]}
    ranked = merge(per, {"a": 1.0, "b": 1.0}, 2)
    assert [_doc(r) for r in ranked] == sorted(["a1", "a2", "b1"], key=point_id)[:2]  # equal U and s: by point id
    assert merge(per, {"a": 1.0, "b": 1.0}, 2) == ranked


def test_empty_domains_give_empty_ranking():
    assert merge({"a": []}, {"a": 0.9}, 5) == []


def test_merge_keeps_the_top_k_by_unified_score_of_every_active_domains_hits():
    """Whatever the scale of s, the result is the k best of all hits of all domains by their U, in order."""
    import random

    rng = random.Random(5)
    probs = {"a": 0.95, "b": 0.6, "c": 0.2}
    per = {d: sorted((_hit(f"{d}{i}", d, rng.uniform(0.05, 0.95)) for i in range(8)), key=lambda h: -h.score) for d in probs}
    everything = merge(per, probs, top_k=100)
    assert sorted(_doc(r) for r in everything) == sorted(_DOCS[h.point_id] for hs in per.values() for h in hs)
    for k in (1, 3, 5, 10, 24):
        top = merge(per, probs, top_k=k)
        assert [_doc(r) for r in top] == [_doc(r) for r in everything[:k]]
        cut = min(r.unified_score for r in top)
        left_out = [r for r in everything if _doc(r) not in {_doc(t) for t in top}]
        assert all(r.unified_score <= cut for r in left_out)  # nothing left out ranks above what was kept
    # U grows with the domain's p at equal s, and with s within a domain.
    same_s = merge({d: [_hit(f"{d}-x", d, 0.5)] for d in probs}, probs, top_k=3)
    assert [r.domain for r in same_s] == ["a", "b", "c"]
    for d in probs:
        mine = [r for r in everything if r.domain == d]
        assert [r.score for r in mine] == sorted((r.score for r in mine), reverse=True)
    # The top-k is not just the best domain's hits: a lower-p domain's strong hit beats a weak hit of a higher p.
    mixed = merge({"a": [_hit("a-weak", "a", 0.1)], "c": [_hit("c-strong", "c", 0.9)]}, {"a": 0.6, "c": 0.5}, top_k=1)
    assert [_doc(r) for r in mixed] == ["c-strong"]
