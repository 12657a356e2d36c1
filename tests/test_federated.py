"""Merging per-domain results by U = p_j * s."""

from service.retrieval.federated import merge
from service.retrieval.passage import Hit, Passage


def _hit(doc_id: str, domain: str, score: float) -> Hit:
    return Hit(Passage(doc_id, domain, doc_id, f"{domain}/page", f"text of {doc_id}"), score)


def test_unified_score_orders_across_domains():
    per = {
        "orbit": [_hit("o1", "orbit", 0.90), _hit("o2", "orbit", 0.50)],
        "ledger": [_hit("l1", "ledger", 0.60), _hit("l2", "ledger", 0.55)],
    }
    probs = {"orbit": 0.5, "ledger": 0.9}
    ranked = merge(per, probs, top_k=4)
    # U: o1 0.45, o2 0.25, l1 0.54, l2 0.495
    assert [r.passage.doc_id for r in ranked] == ["l1", "l2", "o1", "o2"]
    assert [round(r.unified_score, 3) for r in ranked] == [0.54, 0.495, 0.45, 0.25]
    assert all(r.unified_score == r.domain_prob * r.score for r in ranked)


def test_raw_score_alone_would_order_differently():
    per = {"a": [_hit("a1", "a", 0.8)], "b": [_hit("b1", "b", 0.7)]}
    assert merge(per, {"a": 0.5, "b": 1.0}, 2)[0].passage.doc_id == "b1"
    assert merge(per, {"a": 1.0, "b": 1.0}, 2)[0].passage.doc_id == "a1"


def test_top_k_cut_and_ties_are_deterministic():
    per = {"a": [_hit("a2", "a", 0.5), _hit("a1", "a", 0.5)], "b": [_hit("b1", "b", 0.5)]}
    ranked = merge(per, {"a": 1.0, "b": 1.0}, 2)
    assert [r.passage.doc_id for r in ranked] == ["a1", "a2"]


def test_empty_domains_give_empty_ranking():
    assert merge({"a": []}, {"a": 0.9}, 5) == []
