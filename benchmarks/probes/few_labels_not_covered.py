"""Probe: "not covered" with few labelled questions (issue 53 item 4) on manuals_dev's half-labelled fold homes.

    python benchmarks/probes/few_labels_not_covered.py --data ../shared/data/manuals_dev --home /tmp/fedqa-manuals-fold0 --fold 0

``--home``: a fold home ``benchmarks/manuals.py --labelled`` made (``labelled.jsonl``: that fold's questions, its router
trained with ``fedqa train router --queries``); no decision is stored in it. The router's validation split is recomputed
as ``train router`` made it (20%, seed 0). Three decisions are scored on the other fold's single-product questions
(the share refused) and on ``oos.jsonl``'s off-topic and neighbouring-product questions (the shares refused):

- ``val_only``: a fit on the validation questions alone against the shipped general ones (3% target): what the
  issue saw ("fitted on 6, refused 46%");
- ``headings_join``: the validation and heading questions against the validation's out-of-scope and the general
  ones at 1% (what ``train router`` fitted below ``FEDQA_NOT_COVERED_MIN_QUESTIONS`` before the few-labels rule);
- ``chosen``: :func:`training.abstention.fit_not_covered`, with its verdict.

``--oos-half``: the home is also given half the out-of-scope questions (those whose qid number has the fold's parity,
as the in-scope folds), as ``fedqa refresh --out-of-scope`` or a curator's "not covered" verdicts give them to the
"not covered" fit (beside the validation's; the router is not retrained on them); only the other half is scored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import Settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.queries import LabelledQuery, load_queries  # noqa: E402
from training.abstention import (  # noqa: E402
    HEADING_FALSE_REFUSAL,
    AbstentionModel,
    choose_features,
    collect_evidence,
    confidences,
    fit,
    fit_not_covered,
    heading_questions,
)
from training.data.general import general_negatives  # noqa: E402
from training.router_data import stratified_split  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the manuals_dev folder")
    ap.add_argument("--home", type=Path, required=True, help="a fold home of benchmarks/manuals.py --labelled")
    ap.add_argument("--fold", type=int, required=True, choices=(0, 1), help="the fold whose questions the home was trained on")
    ap.add_argument("--oos-half", action="store_true", help="give the fold's half of the out-of-scope questions to the fit, score the other")
    args = ap.parse_args(argv)
    rows = [
        json.loads(line)
        for name in ("questions.jsonl", "oos.jsonl")
        for line in (args.data / name).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]

    def other_fold(r: dict) -> bool:
        return int(r["qid"].rsplit("-", 1)[1]) % 2 != args.fold

    oos = [r for r in rows if r["kind"] == "oos"]
    given = [LabelledQuery(r["qid"], r["query"], []) for r in oos if args.oos_half and not other_fold(r)]
    scored_oos = [r for r in oos if not args.oos_half or other_fold(r)]
    groups = {
        "in_scope": [r["query"] for r in rows if r["kind"] == "single" and other_fold(r)],
        "off_topic": [r["query"] for r in scored_oos if r["neighbour_of"] is None],
        "neighbours": [r["query"] for r in scored_oos if r["neighbour_of"] is not None],
    }
    settings = Settings(home=args.home)
    train, val = stratified_split(load_queries(args.home / "labelled.jsonl"), 0.2, seed=0)
    inside, outside = [q for q in val if q.domains], [q for q in val if not q.domains]
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        scored = {k: collect_evidence(pipeline, v) for k, v in groups.items()}
        ev_val = collect_evidence(pipeline, [q.query for q in inside], gold=[q.gold_doc_ids for q in inside])
        ev_out = collect_evidence(pipeline, [q.query for q in outside] + [q.query for q in general_negatives()])
        ev_head = collect_evidence(pipeline, [q.query for q in heading_questions(pipeline)])
        chosen = fit_not_covered(settings, inside, [*outside, *given], known=[q for q in train if q.domains], save=False, pipeline=pipeline)
    finally:
        pipeline.close()

    def fitted(rows_in: np.ndarray, target: float) -> AbstentionModel:
        features = choose_features(rows_in, ev_out, false_refusal=target)["features"]
        return fit(rows_in, ev_out, false_refusal=target, features=features)

    def refused(model: AbstentionModel | None) -> dict[str, float] | None:
        return None if model is None else {k: round(float(np.mean(confidences(model, e) < model.threshold)), 4) for k, e in scored.items()}

    out = {
        "questions": {k: len(v) for k, v in groups.items()},
        "given_out_of_scope": len(given),
        "validation_in_scope": len(inside),
        "val_only": refused(fitted(ev_val, 0.03)),
        "headings_join": refused(fitted(np.vstack([ev_val, ev_head]), HEADING_FALSE_REFUSAL)),
        "chosen": refused(chosen.model),
        "verdict": chosen.decision.says(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
