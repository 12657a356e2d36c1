"""Probe: how the dense and the lexical (BM25) rankings are best fused, on manuals_dev's single questions.

    python benchmarks/probes/lexical_fusion.py --data ../shared/data/manuals_dev --home /tmp/fedqa-manuals [--depth 30]

On a home that ``benchmarks/manuals.py`` ingested: each single question's per-product dense hits (the served query
vector, uniform router) and BM25 hits (the home's lexical index), ``--depth`` of each per product, are fused several
ways, and Acc@1 under the data's rule and its strict rule (a) is printed for each: dense alone, BM25 alone, reciprocal
rank fusion (k = 60) over each ranking's top 5, 10, 20 and ``--depth`` per product and with the lexical ranking
weighted 0.5 and 2, and a convex sum s + w * b / max(b) at a few weights. It chooses nothing: it prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manuals import Question, answers, load  # noqa: E402

from service.retrieval.federated import merge  # noqa: E402
from service.retrieval.lexical import LexicalHits, RankFusion  # noqa: E402
from service.retrieval.passage import Hit, Passage  # noqa: E402


def _rrf(dense: dict[str, list[Hit]], lexical: dict[str, list[Hit]], depth: int, weight: float) -> list[str]:
    cut = {d: h[:depth] for d, h in dense.items()}
    lex = LexicalHits({d: h[:depth] for d, h in lexical.items()}, RankFusion(lexical_weight=weight))
    return [c.point_id for c in merge(cut, dict.fromkeys(dense, 1.0), 1, lexical=lex)]


def _dense(dense: dict[str, list[Hit]], lexical: dict[str, list[Hit]]) -> list[str]:
    return [c.point_id for c in merge(dense, dict.fromkeys(dense, 1.0), 1)]


def _bm25(dense: dict[str, list[Hit]], lexical: dict[str, list[Hit]]) -> list[str]:
    hits = [h for hs in lexical.values() for h in hs]
    return [max(hits, key=lambda h: h.score).point_id] if hits else []


def _convex(dense: dict[str, list[Hit]], lexical: dict[str, list[Hit]], weight: float) -> list[str]:
    best = max((h.score for hs in lexical.values() for h in hs), default=0.0) or 1.0
    score: dict[str, float] = {}
    for d, hits in dense.items():
        floor = min((h.score for h in hits), default=0.0)
        b = {h.point_id: h.score / best for h in lexical.get(d, [])}
        s = {h.point_id: h.score for h in hits}
        for pid in set(s) | set(b):
            score[pid] = s.get(pid, floor) + weight * b.get(pid, 0.0)
    return sorted(score, key=lambda p: -score[p])[:1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--depth", type=int, default=30)
    args = ap.parse_args(argv)
    from service.config import Settings
    from service.loading import load_pipeline

    questions = [q for q in load(args.data) if q.kind == "single"]
    pipeline = load_pipeline(Settings(home=args.home), with_llm=False)
    lexical_index = pipeline.lexical
    assert lexical_index is not None, "the home's index has no lexical index"
    variants: dict[str, Callable[[dict[str, list[Hit]], dict[str, list[Hit]]], list[str]]] = {
        "dense alone": _dense,
        "bm25 alone": _bm25,
    }
    for depth in sorted({5, 10, 20, args.depth}):
        variants[f"rrf top {depth}"] = partial(_rrf, depth=depth, weight=1.0)
    for w in (0.5, 2.0):
        variants[f"rrf top 5, lexical x{w}"] = partial(_rrf, depth=5, weight=w)
    for w in (0.1, 0.2, 0.3, 0.5):
        variants[f"s + {w} b/max b (top {args.depth})"] = partial(_convex, weight=w)
    hits_at: dict[str, list[tuple[bool, bool]]] = {name: [] for name in variants}
    try:
        for q in questions:
            vector = pipeline.prepare(q.query).vector
            dense = {d: pipeline.store.search(d, vector, args.depth) for d in pipeline.domains}
            tokens = lexical_index.query_tokens(q.query)
            lexical = {d: lexical_index.search(d, tokens, args.depth) for d in pipeline.domains}
            for name, rank in variants.items():
                hits_at[name].append(_score(pipeline, rank(dense, lexical), q))
    finally:
        pipeline.close()
    print(f"{len(questions)} single questions; depth {args.depth} per product")
    print(f"{'variant':<36} {'acc1':>6} {'acc1 (a)':>9}")
    for name, rows in hits_at.items():
        a = np.array(rows, dtype=float)
        print(f"{name:<36} {a[:, 0].mean():6.3f} {a[:, 1].mean():9.3f}")
    return 0


def _score(pipeline, top: list[str], q: Question) -> tuple[bool, bool]:  # noqa: ANN001
    if not top:
        return False, False
    passage: Passage | None = None
    for d in pipeline.domains:
        found = pipeline.store.passages(d, top[:1])
        if found:
            passage = next(iter(found.values()))
            break
    if passage is None:
        return False, False
    return tuple(any(answers(passage.text, passage.source, g, e, strict=s) for g, e in q.parts) for s in (False, True))  # type: ignore[return-value]


if __name__ == "__main__":
    raise SystemExit(main())
