"""benchmarks/bench_scale.py: the split of a corpus into M sub-products, the relabelling and the router's
out-of-sample Acc@1 (the tiny end-to-end run is tests/integration/test_bench_scale_run.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.bench_scale import load_slice, relabel, router_recall, split_products

KEYS = {
    "products",
    "passages",
    "ingest_s",
    "rss_mib",
    "router_train_s",
    "p50_ms_uis",
    "p95_ms_uis",
    "p50_ms_default",
    "p95_ms_default",
    "searched_mean",
    "searched_fraction",
    "acc_at_1_uis",
    "acc_at_1_default",
    "acc_at_1_oracle",
}


def _pages(n_products: int, pages: int, sections: int, per: int) -> list[dict]:
    return [
        {"doc_id": f"p{p}/g{g}#{s}{i}", "domain": f"p{p}", "source": f"p{p}/g{g}", "title": f"g{g} > s{s}", "text": f"{p} {g} {s} {i}"}
        for p in range(n_products)
        for g in range(pages * (p + 1))  # products of different sizes
        for s in range(sections)
        for i in range(per)
    ]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 12, 30])
def test_the_split_makes_m_products_of_similar_size_along_pages_and_sections(m: int) -> None:
    docs = _pages(4, 3, 4, 2)  # pages of 8 passages in sections of 2; 24, 48, 72, 96 passages per product
    sub = split_products(docs, m)
    assert sub == split_products(docs, m)  # deterministic
    assert len(set(sub)) == m
    for s in set(sub):  # a sub-product is a contiguous run of one product (or whole products when m < 4)
        idx = [i for i, x in enumerate(sub) if x == s]
        if m >= 4:
            assert idx == list(range(idx[0], idx[-1] + 1)) and len({docs[i]["domain"] for i in idx}) == 1
        else:
            assert all(sub[i] == s for d in {docs[i]["domain"] for i in idx} for i, x in enumerate(docs) if x["domain"] == d)
    if m >= 4:
        sizes = Counter(sub)
        section = Counter((d["source"], d["title"]) for d in docs)
        assert all(len({sub[i] for i, d in enumerate(docs) if (d["source"], d["title"]) == k}) == 1 for k in section)  # sections whole
        per_product = {p: [n for s, n in sizes.items() if s == p or s.startswith(f"{p}-")] for p in {d["domain"] for d in docs}}
        assert all(max(ns) - min(ns) <= 2 for ns in per_product.values())  # within a product: one section apart


def test_questions_take_the_sub_products_of_their_gold_passages(demo_corpus: Path) -> None:
    docs, qs = load_slice(demo_corpus, 120, 40, seed=0)
    gold = {g for q in qs for g in q["gold_doc_ids"]}
    assert len(qs) == 40 and gold <= {d["doc_id"] for d in docs} and len(docs) >= 120
    for m in (2, 3, 6):
        sdocs, sqs = relabel(docs, qs, m)
        of = {d["doc_id"]: d["domain"] for d in sdocs}
        assert len(set(of.values())) == m
        assert all(set(q["domains"]) == {of[g] for g in q["gold_doc_ids"]} for q in sqs)


def test_router_recall_counts_the_rank_of_the_best_gold_product() -> None:
    recall, need = router_recall([1, 1, 2, 3, 10, 1, 1, 1, 1, 4], 20)
    assert recall == {"1": 0.6, "2": 0.7, "4": 0.9, "5": 0.9}
    assert need == {"90%": 4, "95%": 10, "99%": 10}
