"""Probe: how many products must the default strategy search at M products? Acc@1 against the breadth searched.

    .venv/bin/python benchmarks/probes/search_breadth.py --work /path/to/bench_scale/work --products 200

Reads the home bench_scale.py left for M (``--work``/home-mM: the split corpus, its index and the two fold routers,
oldest first: the router trained without fold i scores fold i, as bench_scale does). Each held-out question is
embedded once and every product searched once (top 5); then, from those hits, Acc@1 (top 5, merged by the router
version's fitted weights U = c_j p_j^lambda s+, the fused strategy's ranking when its fit is the prior family) is
computed as if only some products had been searched, products taken in order of their weight c_j p_j^lambda
(:func:`~service.routing.fusion.search_order`, as the served breadth takes them):

- ``top_k``: the k heaviest products;
- ``mass``: the fewest heaviest products whose router probabilities sum to at least pi of the question's total.

Prints one JSON object: uis (every product, raw s), the default over every product, and each rule's Acc@1 and
products searched (mean and share of M).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from bench_scale import FAQ6, folds, load_slice, relabel  # noqa: E402

TOP_K = 5
KS = [1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 40, 60]
MASSES = [0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--products", type=int, required=True)
    args = ap.parse_args()
    from service.artifacts import Registry
    from service.config import get_settings
    from service.loading import load_pipeline
    from service.retrieval.federated import search_domains
    from service.routing.fusion import domain_weights, per_domain, search_order

    home = args.work / f"home-m{args.products}"
    os.environ["FEDQA_HOME"] = str(home)
    docs, qs = load_slice(FAQ6, None, None, 0)
    _, sqs = relabel(docs, qs, args.products)
    registry = Registry(home)
    routers = sorted(v.version for v in registry.list("router"))
    active = registry.active()["router"]
    rows: dict[str, list[float]] = defaultdict(list)
    params_seen = []
    try:
        for held_ids, router in zip(folds(qs), routers, strict=True):
            registry.activate("router", router)
            get_settings.cache_clear()
            pipeline = load_pipeline(get_settings(), with_llm=False)
            try:
                domains = list(pipeline.domains)
                params = pipeline.router.fitted.fusion
                params_seen.append({"router": router, **({k: v for k, v in params.as_dict().items() if k != "domain_weight"} if params else {})})
                c = per_domain(params, domains) if params else np.ones(len(domains))
                sharp = params.sharpness if params else 0.0
                held = [q for q in sqs if q["qid"] in held_ids]
                preps = pipeline.prepare_many([q["query"] for q in held])
                for q, prep in zip(held, preps, strict=True):
                    hits, _ = search_domains(pipeline.store, prep.vector, domains, TOP_K)
                    p = np.array([prep.probs[d] for d in domains])
                    w = domain_weights(p, sharp, c)
                    index = {d: i for i, d in enumerate(domains)}
                    order = np.array([index[d] for d in search_order(w, p, domains)])
                    gold = set(q["gold_doc_ids"])

                    def acc(chosen: np.ndarray, weights: np.ndarray, *, hits=hits, gold=gold, domains=domains, store=pipeline.store) -> float:  # noqa: ANN001
                        best = max(
                            ((weights[i] * max(h.score, 0.0), domains[i], h.point_id) for i in chosen for h in hits[domains[i]][:1]),
                            default=None,
                        )
                        if best is None:
                            return 0.0
                        return float(next(iter(store.passages(best[1], [best[2]]).values())).doc_id in gold)

                    rows["uis"].append(acc(np.arange(len(domains)), np.ones(len(domains))))
                    rows["default_all"].append(acc(order, w))
                    for k in KS:
                        rows[f"top_k={k}"].append(acc(order[:k], w))
                        rows[f"top_k={k}:searched"].append(min(k, len(domains)))
                    cum = np.cumsum(p[order]) / max(p.sum(), 1e-12)
                    for pi in MASSES:
                        n = int(np.searchsorted(cum, pi) + 1)
                        rows[f"mass={pi}"].append(acc(order[:n], w))
                        rows[f"mass={pi}:searched"].append(min(n, len(domains)))
            finally:
                pipeline.close()
    finally:
        if active:
            registry.activate("router", active)
    m = args.products
    out: dict = {"products": m, "questions": len(rows["uis"]), "params": params_seen}
    for name, values in rows.items():
        if name.endswith(":searched"):
            continue
        entry = {"acc_at_1": round(float(np.mean(values)), 4)}
        d = np.asarray(values) - np.asarray(rows["default_all"])
        entry.update(lost=int((d < 0).sum()), won=int((d > 0).sum()))
        if f"{name}:searched" in rows:
            s = float(np.mean(rows[f"{name}:searched"]))
            entry.update(searched_mean=round(s, 2), searched_fraction=round(s / m, 4))
        out[name] = entry
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
