"""Probe: what a labelled question's own count in the page prior changes, and what the known answers cost a request.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/own_count.py --queries $FEDQA_HOME/training-data/val.jsonl

The router version's page prior counts its validation questions; the fits made after the router (split rule, answer
policy, "not covered") rank each with its own count left out (``training.page_prior.unseen``). Prints, over the
questions with gold passages: Acc@Top1 of the served ranking (default strategy, deterministic gate, reranked as
served) with and without the own count, the number of questions whose "not covered" evidence differs and by how much,
and the milliseconds of ``PagePrior.bonus_for`` per question (``--calls`` calls on a random vector).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.queries import load_queries  # noqa: E402
from training.abstention import collect_evidence  # noqa: E402
from training.page_prior import unseen  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", required=True)
    ap.add_argument("--calls", type=int, default=1000)
    args = ap.parse_args()
    qs = [q for q in load_queries(args.queries) if q.gold_doc_ids and q.domains]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        counted = unseen_top1 = 0
        for q in qs:
            r = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic")
            counted += bool(r.hits) and r.hits[0].passage.doc_id in q.gold_doc_ids
            with unseen(pipeline, q.gold_doc_ids):
                r = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic")
            unseen_top1 += bool(r.hits) and r.hits[0].passage.doc_id in q.gold_doc_ids
        with_own = collect_evidence(pipeline, [q.query for q in qs])
        without = collect_evidence(pipeline, [q.query for q in qs], gold=[q.gold_doc_ids for q in qs])
        prior = pipeline.router.fitted.page_prior
        cost = None
        if prior is not None:
            v = np.random.default_rng(0).normal(size=pipeline.encoder.dim).astype(np.float32)
            t0 = time.perf_counter()
            for _ in range(args.calls):
                prior.bonus_for(v)
            cost = (time.perf_counter() - t0) * 1000.0 / args.calls
    finally:
        pipeline.close()
    diff = np.abs(with_own - without).max(axis=1)
    out = {
        "questions": len(qs),
        "acc_at_top1_own_count_in": round(counted / len(qs), 4),
        "acc_at_top1_own_count_out": round(unseen_top1 / len(qs), 4),
        "evidence_differs": int((diff > 1e-9).sum()),
        "evidence_max_abs_diff": round(float(diff.max()), 4),
        "bonus_for_ms": None if cost is None else round(cost, 3),
        "prior": None if prior is None else {"weight": prior.weight, "penalty": prior.penalty, "match": prior.match, "known": len(prior.known)},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
