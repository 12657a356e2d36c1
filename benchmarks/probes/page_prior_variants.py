"""Probe: two variants of the page prior with known answers, neither adopted.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/page_prior_variants.py --data $FEDQA_HOME/training-data --router-scaled
    ... --near 3

The candidates and features of ``claimed_passages.py`` (served top ``depth``, page prior off; counts and vectors of
the training split's labelled rows, the rows sharing a scored question's gold passages left out), ranked by
``U + a * f - b * claimed * max(0, t - c)`` with, instead of the page term f = log(1 + n):

- ``--router-scaled``: f = p_j * log(1 + n), p_j the router's probability of the candidate's product;
- ``--near L``: f as served, plus ``e * g``, g the largest ``cos(question, q') * exp(-|i - i'| / L)`` over the
  labelled questions q' whose gold passage (position i' on the page) shares the candidate's page (position i).

Prints the 5-fold Acc@1 (setting chosen on four fifths) of the served form and of the variant on the same grid.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from claimed_passages import evidence  # noqa: E402
from question_neighbours import _crossfit, served  # noqa: E402

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402

A_GRID = [0.0, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15]
B_GRID = [0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
T_GRID = [0.6, 0.7, 0.8, 0.9, 0.95]
E_GRID = [0.0, 0.02, 0.05, 0.1, 0.2]


def _position(doc_id: str) -> int:
    tail = doc_id.rsplit("#", 1)[-1]
    return int(tail) if tail.isdigit() else -99


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--router-scaled", action="store_true")
    ap.add_argument("--near", type=float, default=0.0, help="L of the nearness term (0: not used)")
    args = ap.parse_args()
    got = served(args.data, args.depth)
    page, rows, qs, cands, sims = got.page, got.rows, got.questions, got.candidates, got.sims
    probs = []
    if args.router_scaled:
        pipeline = load_pipeline(get_settings(), with_llm=False)
        try:
            probs = [pipeline.probabilities(q.query) for q in qs]
        finally:
            pipeline.close()
    feats = []  # per question: (f served, f variant, claimed, c, g)
    for i, c in enumerate(cands):
        ev = evidence(got, i)
        f = ev.page
        pj = np.array([probs[i].get(d.split("/")[0], 0.0) for d in c.doc_ids]) if probs else np.ones(len(f))
        g = np.zeros(len(f))
        if args.near > 0:
            for k, d in enumerate(c.doc_ids):
                near = [
                    float(sims[i, j]) * math.exp(-abs(_position(a) - _position(d)) / args.near)
                    for j in ev.kept
                    for a in rows[j].positives
                    if a != d and page.get(a) == page.get(d)
                ]
                g[k] = max(near, default=0.0)
        feats.append((f, pj * f, ev.claimed, ev.nearest, g))
    grid = [(a, b, t, e) for a in A_GRID for b in B_GRID for t in (T_GRID if b else [0.0]) for e in (E_GRID if args.near > 0 else [0.0])]

    def per(variant: bool) -> np.ndarray:
        return np.array(
            [
                [
                    c.gold[
                        int(
                            np.argmax(
                                np.asarray(c.unified) + a * (fv if variant else fs) - b * k * np.maximum(0.0, t - h) + (e * g if variant else 0)
                            )
                        )
                    ]
                    for c, (fs, fv, k, h, g) in zip(cands, feats, strict=True)
                ]
                for a, b, t, e in grid
            ],
            dtype=float,
        )

    served_form = per(False)
    print(
        json.dumps(
            {
                "questions": len(cands),
                "variant": "router-scaled" if args.router_scaled else f"near L={args.near}" if args.near > 0 else "none",
                "crossfit_served_form": _crossfit(served_form, args.folds),
                "crossfit_variant": _crossfit(per(True), args.folds),
            }
        )
    )


if __name__ == "__main__":
    main()
