"""Probe: how the page prior's bonus is shaped, and what counts for a page.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/page_prior_forms.py --data $FEDQA_HOME/training-data [--depth 20]

The validation questions' served rankings (the default strategy with the router version's fusion parameters, the page
prior off, not reranked, top ``depth``) are re-ordered by ``U + w * f(n)``, n the count of the candidate's page
(a passage's ``source``) among the training questions' gold passages. Printed per form (f = log(1 + n), n > 0,
sqrt(n)) and count (labelled questions only, or labelled and cross-domain rows, each once per page): single-product
Acc@1 at every weight, and the 5-fold figure (the weight chosen on four fifths, scored on the rest). The served
prior is log(1 + n) over every expert row (training/page_prior.py), weight and depth fitted by ``fedqa train router``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402
from training.reranker_data import with_candidates  # noqa: E402

WEIGHTS = [0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5]
FORMS: dict[str, Callable[[int], float]] = {"log1p": math.log1p, "indicator": lambda n: float(n > 0), "sqrt": math.sqrt}
COUNTS = {"labelled": {"labelled"}, "labelled+cross": {"labelled", "cross"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = TrainingData.load(args.data)
    page = {d: p.source for d, p in data.passages.items()}
    qs = [q for q in data.val if q.gold_doc_ids and not q.is_cross]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        pipeline.router.fitted = replace(pipeline.router.fitted, page_prior=None)
        cands = with_candidates(pipeline, qs, ["labelled"] * len(qs), depth=args.depth, passages=None)
    finally:
        pipeline.close()
    splits = assigned_folds(permuted_folds(len(cands), args.folds, np.random.default_rng(0)))
    out: dict = {"questions": len(cands), "depth": args.depth}
    for count_name, origins in COUNTS.items():
        counts: dict[str, int] = {}
        for r in data.retriever_rows:
            if r.origin in origins:
                for p in {page.get(g) for g in r.positives} - {None}:
                    counts[str(p)] = counts.get(str(p), 0) + 1
        for form_name, f in FORMS.items():
            per = np.stack(
                [
                    [
                        c.gold[int(np.argmax(np.asarray(c.unified) + w * np.asarray([f(counts.get(page.get(d, ""), 0)) for d in c.doc_ids])))]
                        for c in cands
                    ]
                    for w in WEIGHTS
                ]
            ).astype(float)
            held = np.zeros(len(cands))
            for rest, test in splits:
                held[test] = per[int(np.argmax(per[:, rest].mean(axis=1))), test]
            out[f"{form_name} / {count_name}"] = {
                "by_weight": {str(w): round(float(a), 3) for w, a in zip(WEIGHTS, per.mean(axis=1), strict=True)},
                "crossfit": round(float(held.mean()), 3),
            }
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
