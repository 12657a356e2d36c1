"""Probe: how well the reranker's best score separates in-scope from out-of-scope questions, per depth and length.

    FEDQA_HOME=<home> python benchmarks/probes/rerank_evidence.py --in-scope $DATA/val.jsonl \
        --sets named=../shared/data/oos_family_dev_named.jsonl family=../shared/data/oos_family_dev.jsonl \
               far=../shared/data/oos_dev.jsonl [--depths 1 2 3 5] [--lengths 128 96 64]

Each question's merged top ``max(depths)`` (the default strategy, deterministic gate, not reranked) is scored by the
active reranker reading at most L tokens of question and passage, for each L of ``--lengths``; the evidence is the
best logit over the first d passages (calibration is monotonic, so the AUC is the calibrated score's). Prints one
JSON object: per (L, d) the AUC between the in-scope questions and each set, the in-scope Acc@1 of the reranked top d
at the version's fitted weight and by the cross-encoder alone, and the mean milliseconds per question of the logits (timing: read with the load).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.queries import load_queries  # noqa: E402


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a random in-scope question's evidence > a random out-of-scope one's), ties counted half."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))


#: A weight under which the cross-encoder's logit alone orders the top d (U only breaks its ties).
CE_ALONE = 1e6


def _acc(questions: list, tops: list[tuple[list[str], list[float], list[str]]], logits: list[np.ndarray], depth: int, weight: float) -> float:
    """In-scope Acc@1 of the top ``depth`` reranked by ``U + weight * ce``."""
    from service.reranking.params import reranked_order

    hits = [
        bool(ids) and ids[reranked_order(u[:depth], ce[:depth].tolist(), weight)[0]] in set(q.gold_doc_ids or [])
        for q, (_, u, ids), ce in zip(questions, tops, logits, strict=True)
    ]
    return round(float(np.mean(hits)), 4) if hits else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-scope", required=True)
    ap.add_argument("--sets", nargs="+", required=True, help="NAME=FILE.jsonl out-of-scope question sets")
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 5])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 96, 64])
    args = ap.parse_args()
    from service.loading import load_pipeline

    in_scope = [q for q in load_queries(args.in_scope) if q.domains]
    sets = {name: load_queries(path) for name, path in (s.split("=", 1) for s in args.sets)}
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        reranker = pipeline.reranker
        if reranker is None:
            raise SystemExit(f"no reranker serves {get_settings().home_dir}: {pipeline.warnings}")
        depth = max(args.depths)

        def top(query: str) -> tuple[list[str], list[float], list[str]]:
            hits = pipeline.retrieve(query, top_k=depth, gate_mode="deterministic", rerank=False).hits
            return (
                [reranker.params.passage_text(h.passage.title, h.passage.text) for h in hits],
                [h.unified_score for h in hits],
                [h.passage.doc_id for h in hits],
            )

        tops = {"in-scope": [top(q.query) for q in in_scope], **{n: [top(q.query) for q in qs] for n, qs in sets.items()}}
        queries = {"in-scope": [q.query for q in in_scope], **{n: [q.query for q in qs] for n, qs in sets.items()}}
        out: dict = {
            "reranker": reranker.version,
            "params": reranker.params.to_json(),
            "in_scope": len(in_scope),
            "sets": {n: len(v) for n, v in sets.items()},
            "rows": [],
        }
        for length in args.lengths:
            model = reranker.with_params(replace(reranker.params, max_length=length))
            logits: dict[str, list[np.ndarray]] = {}
            t0, pairs = time.perf_counter(), 0
            for name, rows in tops.items():
                logits[name] = [model.logits(q, texts) for q, (texts, _, _) in zip(queries[name], rows, strict=True)]
                pairs += sum(len(t) for t, _, _ in rows)
            ms_pair = (time.perf_counter() - t0) * 1000 / max(pairs, 1)
            for d in args.depths:
                best = {n: np.array([float(ce[:d].max()) if len(ce) else -1e9 for ce in v]) for n, v in logits.items()}
                row = {"max_length": length, "depth": d, "ms_per_question": round(ms_pair * d, 1)}
                row["acc_at_1"], row["acc_at_1_ce"] = (
                    _acc(in_scope, tops["in-scope"], logits["in-scope"], d, w) for w in (model.params.weight, CE_ALONE)
                )
                row.update({f"auc_{n}": round(_auc(best["in-scope"], best[n]), 4) for n in sets})
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
    finally:
        pipeline.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
