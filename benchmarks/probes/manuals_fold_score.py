"""Probe: score one manuals_dev fold home on the other fold's single questions (and the cross and out-of-scope ones),
as ``benchmarks/manuals.py --labelled`` scores its fold homes, after any change made to that home by hand.

    python benchmarks/probes/manuals_fold_score.py --data ../shared/data/manuals_dev --home <fold home> --fold N

``--home``: a fold home ``benchmarks/manuals.py --labelled`` made (``<home>-fold0``, ``<home>-fold1``: trained on the
single questions whose qid number has parity N), or a copy of one changed since (e.g. ``fedqa refresh --corpus
DATA/docs --queries <home>/labelled.jsonl``, to measure a fine-tuned retriever). Prints Acc@1 under the strict rule (a)
and the data's rule, hit@5 strict, in-scope refusals and "not covered" shares per group, as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import manuals  # noqa: E402

KEEP = ("acc1", "acc1_strict", "hit5_strict", "refused", "not_covered", "n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the manuals_dev folder")
    ap.add_argument("--home", type=Path, required=True, help="the fold home to score")
    ap.add_argument("--fold", type=int, choices=(0, 1), required=True, help="the parity of the qids it was trained on")
    ap.add_argument("--strategy", default="fused", help="the strategy to serve (default: the default strategy)")
    args = ap.parse_args(argv)
    questions = manuals.load(args.data)
    held = [q for q in questions if q.kind == "single" and int(q.qid.rsplit("-", 1)[1]) % 2 != args.fold]
    scored = held + [q for q in questions if q.kind != "single"]
    passages = manuals.index_passages(args.home)
    ranked = manuals.serve_rankings(args.home, scored, strategy=args.strategy)
    mean_words = float(np.mean([len(p.text.split()) for p in passages]))
    out = manuals.score(scored, ranked, mean_words)
    print(json.dumps({g: {k: v for k, v in d.items() if k in KEEP} for g, d in out.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
