"""Probe: where manuals_dev's strict Acc@1 is lost, and whether an unfitted re-scoring of the served top 20 finds it.

    FEDQA_HOME=~/fedqa-manuals python benchmarks/probes/manuals_top20.py --data ../shared/data/manuals_dev

On a home that ingested manuals_dev (``benchmarks/manuals.py`` makes one): how many of the 120 single questions have
a passage in the index that answers them under the strict rule (a), and how many such passages; per product the
strict Acc@1, hit@5 and hit@20 of the served ranking (deterministic gate, top 20); then each question's top 20
re-ordered by the served rank plus the rank by another cosine of the question (the shipped encoder's query vector) to
each passage: as the index embeds it (text), as ``title: text``, its title alone, its best sentence, and sums. No
weight is fitted: ranks are added. Writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manuals import answers, index_passages, load  # noqa: E402

from service.config import Settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.text import sentences  # noqa: E402

PRODUCTS = ("postfix", "haproxy", "gnuplot")
TOP = 20


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Each item's rank by descending score (0 first; ties in list order)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(len(scores))
    return ranks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the manuals_dev folder")
    args = ap.parse_args(argv)
    settings = Settings()
    questions = [q for q in load(args.data) if q.kind == "single"]
    by_page = defaultdict(list)
    for p in index_passages(settings.home_dir):
        by_page[p.source].append(p)
    parts = [q.parts[0] for q in questions]  # a single question's gold pages and evidence
    counts = [sum(answers(p.text, p.source, g, e, strict=True) for s in g for p in by_page.get(s, [])) for g, e in parts]
    each = sorted(Counter(min(c, 5) for c in counts).items())
    print(f"questions with a strictly answering passage: {sum(c > 0 for c in counts)} of {len(counts)}; passages each (5: or more): {each}")
    pipeline = load_pipeline(settings, with_llm=False)
    first: dict[str, int | None] = {}
    wins: dict[str, list[bool]] = defaultdict(list)
    try:
        enc = pipeline.encoder
        for q in questions:
            hits = [h.passage for h in pipeline.retrieve(q.query, top_k=TOP, gate_mode="deterministic").hits]
            gold, evidence = q.parts[0]
            ok = np.array([answers(p.text, p.source, gold, evidence, strict=True) for p in hits])
            first[q.qid] = int(ok.argmax()) if ok.any() else None
            if not hits:
                continue
            v = enc.embed_query(q.query)
            text = enc.embed_passages([p.text for p in hits]) @ v
            titled = enc.embed_passages([f"{p.title}: {p.text}" for p in hits]) @ v
            title = enc.embed_passages([p.title for p in hits]) @ v
            best = np.array([float(np.max(enc.embed_passages([s for s in sentences(p.text) if s.strip()] or [p.text]) @ v)) for p in hits])
            served = np.arange(len(hits), dtype=float)
            orders = {
                "served": served,
                "text cosine alone": _ranks(text),
                "served + title: text": served + _ranks(titled),
                "served + text + title: text": served + _ranks(text + titled),
                "served + best sentence": served + _ranks(best),
                "served + title": served + _ranks(title),
                "served + text + title: text + best sentence": served + _ranks(text + titled) + _ranks(best),
            }
            for name, key in orders.items():
                wins[name].append(bool(ok[int(np.lexsort((served, key))[0])]))
    finally:
        pipeline.close()
    for product in PRODUCTS:
        ranks = [r for qid, r in first.items() if qid.startswith(product)]
        share = {k: sum(r is not None and r < k for r in ranks) / len(ranks) for k in (1, 5, 20)}
        print(f"{product:8s} strict Acc@1 {share[1]:.3f}  hit@5 {share[5]:.3f}  hit@20 {share[20]:.3f}")
    for name, won in wins.items():
        per = {p: round(float(np.mean([w for w, q in zip(won, questions, strict=True) if q.qid.startswith(p)])), 3) for p in PRODUCTS}
        print(f"{name:46s} {np.mean(won):.3f} {per}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
