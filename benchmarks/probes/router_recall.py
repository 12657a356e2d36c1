"""Probe: how many of M products the router's top k must hold for the gold product, out of sample, without the fits.

    python benchmarks/probes/router_recall.py --products 200 --work <bench_scale's --work folder>

On the home bench_scale.py built for M (``<work>/home-m<M>``, its index of faq6 cut into M sub-products) and its
vector cache: per fold of bench_scale's two (the router trained on one half of the dev questions scores the other),
the router head is trained as ``fedqa train router --queries`` trains it (its 20 % validation split, the heuristic
synthetic questions of the index's passages, the default RouterConfig; validation questions join training when a
product has too few, as there) by training.router's own functions, and the held-out questions are ranked by the
head's raw logits (``--calibrated``: by the calibrated p, the temperature and per-product biases fitted as
``train router`` fits them). No fused fit, "not covered" or by-product fit (the fused fit is what makes ``train
router`` slow at hundreds of products); without ``--calibrated`` the per-product biases that move ranks are left out.
Prints one JSON line: recall@k and the k that covers 90/95/99 % of the questions (bench_scale's ``router_recall``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_scale import cached_encoder, folds, load_slice, relabel, router_recall  # noqa: E402
from speed_common import FAQ6  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--faq6", type=Path, default=FAQ6)
    ap.add_argument("--calibrated", action="store_true", help="rank by the calibrated p (temperature, per-product biases) as train router fits it")
    args = ap.parse_args()
    os.environ["FEDQA_HOME"] = str(args.work / f"home-m{args.products}")
    from service.config import get_settings
    from service.queries import LabelledQuery
    from training.calibration import fit_calibration
    from training.router import RouterConfig, _active_index, _training_questions, train_head
    from training.router_data import label_matrix, sample_weights, stratified_split
    from training.router_heldout import out_of_fold_logits, thin_domains

    t0 = time.perf_counter()
    settings, cfg = get_settings(), RouterConfig()
    _, index_version, _, domains = _active_index(settings)
    encoder = cached_encoder(settings, args.work / "vectors")
    docs, qs = load_slice(args.faq6, None, None, 0)
    _, sqs = relabel(docs, qs, args.products)
    ranks = []
    for held_ids in folds(qs):
        lq = [LabelledQuery(q["qid"], q["query"], q["domains"], q["gold_doc_ids"]) for q in sqs]
        train, val = stratified_split([q for q in lq if q.qid not in held_ids], 0.2, seed=0)
        thin = bool(thin_domains(val, domains, cfg.min_val_per_domain))
        if thin:
            train = [*train, *val]
        rows, origins = _training_questions(settings, index_version, domains, train, ["labelled"] * len(train), None, cfg)
        vectors = encoder.embed_queries([q.query for q in rows])
        labels, weights = label_matrix(rows, domains), sample_weights(rows, origins, cfg.labelled_weight)
        head = train_head(vectors, labels, weights, domains, cfg, retriever="base")
        if args.calibrated and thin:  # as train_and_activate: calibration fitted out of fold over the labelled questions
            labelled = [i for i, o in enumerate(origins) if o != "synthetic"]
            oof = out_of_fold_logits(vectors, labels, weights, labelled, domains, cfg, retriever="base")
            cal = fit_calibration(oof, labels[labelled])
        elif args.calibrated:
            cal = fit_calibration(head.raw_logits(encoder.embed_queries([q.query for q in val])), label_matrix(val, domains))
        held = [q for q in lq if q.qid in held_ids]
        logits = head.raw_logits(encoder.embed_queries([q.query for q in held]))
        logits = cal.apply(logits) if args.calibrated else logits
        for q, row in zip(held, logits, strict=True):
            order = [domains[i] for i in np.argsort(-row, kind="stable")]
            ranks.append(1 + min(order.index(d) for d in q.domains))
    recall, need = router_recall(ranks, args.products)
    out = {"products": args.products, "questions": len(ranks), "router_recall_at_k": recall, "router_k_for": need}
    out["ranking"] = "calibrated p" if args.calibrated else "raw head logits (uncalibrated)"
    print(json.dumps({**out, "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
