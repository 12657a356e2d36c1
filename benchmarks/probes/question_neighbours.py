"""Probe: the pages of the labelled questions nearest to a question, beside the page prior.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/question_neighbours.py --data $FEDQA_HOME/training-data [--k 10]

The validation single questions' served rankings (the default strategy, page prior off, not reranked, top
``depth``) are re-ordered by ``U + a * log(1 + n) + b * g``: n the count of the candidate's page among the training
split's expert rows (the page prior's form), g the summed cosine of the ``k`` training questions nearest to the
question (the retriever's query vectors) whose gold passages are on that page. Prints Acc@1 over the (a, b) grid and
the 5-fold figure (the pair chosen on four fifths, scored on the rest) for b = 0 (the page prior alone) and for the
whole grid.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402
from training.reranker_data import with_candidates  # noqa: E402

A_GRID = [0.0, 0.02, 0.03, 0.05, 0.075]
B_GRID = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2]


def _crossfit(per: np.ndarray, folds: int) -> float:
    """per: (settings, questions) 0/1; the setting chosen on k-1 folds, scored on the k-th."""
    held = np.zeros(per.shape[1])
    for rest, test in assigned_folds(permuted_folds(per.shape[1], folds, np.random.default_rng(0))):
        held[test] = per[int(np.argmax(per[:, rest].mean(axis=1))), test]
    return round(float(held.mean()), 3)


@dataclass
class Served:
    """The validation single questions' served rankings (page prior off) beside the training split's labelled rows."""

    page: dict[str, str]  # doc_id -> page
    rows: list  # the labelled (not synthetic) retriever rows
    questions: list  # the validation single questions with gold passages
    candidates: list  # their served top ``depth``
    sims: np.ndarray  # (questions, rows) cosine of the query vectors


def served(data_dir: str, depth: int) -> Served:
    """:class:`Served` of the active versions of $FEDQA_HOME and the training set ``data_dir``."""
    data = TrainingData.load(data_dir)
    rows = [r for r in data.retriever_rows if r.origin != "synthetic"]
    qs = [q for q in data.val if q.gold_doc_ids and not q.is_cross]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        pipeline.router.fitted = replace(pipeline.router.fitted, page_prior=None)
        cands = with_candidates(pipeline, qs, ["labelled"] * len(qs), depth=depth, passages=None)
        train_vecs = pipeline.encoder.embed_queries([r.query for r in rows])
        val_vecs = pipeline.encoder.embed_queries([q.query for q in qs])
    finally:
        pipeline.close()
    return Served({d: p.source for d, p in data.passages.items()}, rows, qs, cands, val_vecs @ train_vecs.T)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    got = served(args.data, args.depth)
    page, rows, cands, sims = got.page, got.rows, got.candidates, got.sims
    row_pages = [{page[g] for g in r.positives if g in page} for r in rows]
    counts: dict[str, int] = {}
    for pages in row_pages:
        for p in pages:
            counts[p] = counts.get(p, 0) + 1
    prior, near = [], []
    for i, c in enumerate(cands):
        top = np.argsort(-sims[i])[: args.k]
        g: dict[str, float] = {}
        for j in top:
            for p in row_pages[j]:
                g[p] = g.get(p, 0.0) + float(sims[i, j])
        prior.append(np.array([math.log1p(counts.get(page.get(d, ""), 0)) for d in c.doc_ids]))
        near.append(np.array([g.get(page.get(d, ""), 0.0) for d in c.doc_ids]))
    grid = [(a, b) for a in A_GRID for b in B_GRID]
    per = np.array(
        [[c.gold[int(np.argmax(np.asarray(c.unified) + a * f + b * h))] for c, f, h in zip(cands, prior, near, strict=True)] for a, b in grid],
        dtype=float,
    )
    alone = np.array([i for i, (_, b) in enumerate(grid) if b == 0])
    out = {
        "questions": len(cands),
        "k": args.k,
        "u_alone": round(float(per[grid.index((0.0, 0.0))].mean()), 3),
        "acc1": {f"a={a} b={b}": round(float(per[i].mean()), 3) for i, (a, b) in enumerate(grid)},
        "crossfit_prior_alone": _crossfit(per[alone], args.folds),
        "crossfit_with_neighbours": _crossfit(per, args.folds),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
