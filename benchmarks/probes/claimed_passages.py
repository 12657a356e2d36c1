"""Probe: passages known to answer another labelled question, beside the page prior.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/claimed_passages.py --data $FEDQA_HOME/training-data

faq6's FAQ answers each answer one question (no two dev questions share a gold passage). A candidate that is the gold
passage of a labelled training question q' ("claimed") answers a new question about as much as the new question
resembles q'. The validation single questions' served rankings (default strategy, page prior off, not reranked, top
``depth``) are re-ordered by ``U + a * log(1 + n) - b * claimed * max(0, t - c)``: n the count of the candidate's page among
the training split's labelled rows (the page prior's form), c the cosine between the question and the nearest
training question claiming the candidate (the retriever's query vectors). Training rows sharing a gold passage with
the scored question are left out. Prints Acc@1 over the grid and the 5-fold figure (setting chosen on four fifths,
scored on the rest) for b = 0 (the page prior alone) and for the whole grid.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from question_neighbours import Served, _crossfit, served  # noqa: E402  (the same candidates and 5-fold choice)

A_GRID = [0.0, 0.02, 0.03, 0.05, 0.075]
B_GRID = [0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
T_GRID = [0.6, 0.7, 0.8, 0.9, 0.95]


@dataclass
class Evidence:
    """One validation question's candidates: the page term, whether each is a known answer, and the cosine to the
    nearest labelled question it answers; ``kept``: the training rows not sharing the question's gold passages."""

    page: np.ndarray
    claimed: np.ndarray
    nearest: np.ndarray
    kept: list[int]


def evidence(got: Served, i: int) -> Evidence:
    """:class:`Evidence` of question ``i`` of ``got``."""
    q, c, page, rows = got.questions[i], got.candidates[i], got.page, got.rows
    gold = set(q.gold_doc_ids)
    kept = [j for j, r in enumerate(rows) if not gold & set(r.positives)]
    counts: dict[str, int] = {}
    best: dict[str, float] = {}
    for j in kept:
        for p in {page[g] for g in rows[j].positives if g in page}:
            counts[p] = counts.get(p, 0) + 1
        for g in rows[j].positives:
            best[g] = max(best.get(g, -1.0), float(got.sims[i, j]))
    return Evidence(
        np.array([math.log1p(counts.get(page.get(d, ""), 0)) for d in c.doc_ids]),
        np.array([1.0 if d in best else 0.0 for d in c.doc_ids]),
        np.array([best.get(d, 0.0) for d in c.doc_ids]),
        kept,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    got = served(args.data, args.depth)
    cands = got.candidates
    prior, claim, near = [], [], []
    top1_claimed = 0
    for i in range(len(cands)):
        ev = evidence(got, i)
        prior.append(ev.page)
        claim.append(ev.claimed)
        near.append(ev.nearest)
        top1_claimed += int(ev.claimed[int(np.argmax(cands[i].unified))] > 0)
    grid = [(a, b, t) for a in A_GRID for b in B_GRID for t in (T_GRID if b else [0.0])]
    per = np.array(
        [
            [
                c.gold[int(np.argmax(np.asarray(c.unified) + a * f - b * k * np.maximum(0.0, t - h)))]
                for c, f, k, h in zip(cands, prior, claim, near, strict=True)
            ]
            for a, b, t in grid
        ],
        dtype=float,
    )
    alone = np.array([i for i, (_, b, _) in enumerate(grid) if b == 0])
    out = {
        "questions": len(cands),
        "u_alone": round(float(per[grid.index((0.0, 0.0, 0.0))].mean()), 3),
        "u_top1_claimed": top1_claimed,
        "gold_in_depth": round(float(np.mean([max(c.gold) for c in cands])), 3),
        "best": sorted(((round(float(per[i].mean()), 3), g) for i, g in enumerate(grid)), reverse=True)[:8],
        "prior_alone_best": round(float(per[alone].mean(axis=1).max()), 3),
        "crossfit_prior_alone": _crossfit(per[alone], args.folds),
        "crossfit_with_claimed": _crossfit(per, args.folds),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
