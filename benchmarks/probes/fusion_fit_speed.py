"""Probe: how long ``fit_fusion`` (training/fusion.py) takes at M products, vectorised and as it was before (issue 31).

    python benchmarks/probes/fusion_fit_speed.py --products 50 200 [--old 50] [--questions 200] [--hits 20]

Seeded synthetic questions shaped like bench_scale's (:func:`synthetic`): M products, ``--hits`` hits per product
with similarities rounded to 3 decimals (ties), some negative, a router right about two times in three, gold absent
for one question in ten. For each M, ``new_s`` is the whole fit (both families, the guard's 5 folds each). The fit
before vectorising is training/fusion.py at :data:`OLD`, read with ``git show``: with ``--old M`` its whole fit is
timed too (``old_s``, tens of minutes at M = 50) and its result must equal the new one (``same``); at every M,
``old_eval_s`` is one of its objective evaluations (one setting scored question by question over all questions)
and ``old_estimate_s`` that times the evaluations of its whole fit (the grid's 630 and the prior family's 8 x (1 +
2 x M x 10) per family fit, 6 fits each), without the rest (the fits' preparation, the logistic model). Prints one
JSON line per M with the machine and its load (timings on a shared machine are rough).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speed_common import REPO, emit  # noqa: E402

sys.path.insert(0, str(REPO))
from service.retrieval.passage import Hit, point_id  # noqa: E402
from training import fusion  # noqa: E402

OLD = "803d66b3693c47fd790dcf6813306c2d05c49593"  # training/fusion.py before the vectorised fit
FOLDS = 5


def synthetic(n: int, m: int, hits: int, seed: int = 0) -> tuple[list[str], list[fusion.FitQuestion]]:
    """``n`` questions over ``m`` products, one gold passage each (absent from the hits one time in ten)."""
    rng = np.random.default_rng(seed)
    domains = [f"p{j:03d}" for j in range(m)]
    out = []
    for i in range(n):
        gold_dom = int(rng.integers(m))
        logits = rng.normal(0.0, 1.0, m)
        logits[gold_dom if rng.random() < 0.67 else int(rng.integers(m))] += 3.0
        p = np.exp(logits) / np.exp(logits).sum()
        per: dict[str, list[Hit]] = {}
        for j, d in enumerate(domains):
            s = np.round(np.sort(rng.uniform(-0.1, 0.55, hits) + (0.1 if j == gold_dom else 0.0))[::-1], 3)
            per[d] = [Hit(point_id(f"q{i}-{d}-{k}"), float(x)) for k, x in enumerate(s)]
        gold = f"q{i}-{domains[gold_dom]}-{int(rng.integers(3))}" if rng.random() < 0.9 else f"q{i}-absent"
        out.append(fusion.FitQuestion(p, per, [domains[gold_dom]], {gold}))
    return domains, out


def old_module() -> types.ModuleType:
    """training/fusion.py at :data:`OLD`, as a module of its own."""
    source = subprocess.run(["git", "show", f"{OLD}:training/fusion.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("fusion_old")
    sys.modules[module.__name__] = module
    exec(compile(source, "fusion_old.py", "exec"), module.__dict__)
    return module


def old_eval_s(old: types.ModuleType, questions: list[fusion.FitQuestion], domains: list[str], top_k: int) -> float:
    """Seconds of one objective evaluation of the old fit: a prior-family setting scored question by question."""
    params = fusion.prior_params(0.05, 20)
    prepared = [old._prepare(q, domains) for q in questions]
    probs = [np.asarray(q.p, dtype=np.float64) for q in questions]
    c = np.ones(len(domains))
    t0 = time.perf_counter()
    for _ in range(3):
        np.array([old._scores(p, pr, params, top_k, c) for p, pr in zip(probs, prepared, strict=True)]).mean(axis=0)
    return (time.perf_counter() - t0) / 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--old", type=int, nargs="*", default=[], help="the M at which the old whole fit is timed too")
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--hits", type=int, default=20)
    ap.add_argument("--top-k", type=int, default=5)
    args = ap.parse_args()
    old = old_module()
    for m in args.products:
        domains, questions = synthetic(args.questions, m, args.hits)
        t0 = time.perf_counter()
        new = fusion.fit_fusion(questions, domains, top_k=args.top_k)
        out: dict = {"products": m, "questions": args.questions, "hits": args.hits, "new_s": round(time.perf_counter() - t0, 2)}
        evals = (1 + FOLDS) * (len(fusion.SHARPNESS_GRID) * len(fusion.TAU0_GRID) * len(fusion.UNSURE_GRID))
        evals += (1 + FOLDS) * len(fusion.PRIOR_GRID) * (1 + fusion.WEIGHT_SWEEPS * m * (len(fusion.WEIGHT_GRID) - 1))
        out["old_eval_s"] = round(old_eval_s(old, questions, domains, args.top_k), 4)
        out["old_estimate_s"] = round(evals * out["old_eval_s"])
        if m in args.old:
            t0 = time.perf_counter()
            before = old.fit_fusion(questions, domains, top_k=args.top_k)
            out["old_s"] = round(time.perf_counter() - t0, 2)
            out["same"] = before == new
        out["chosen"] = new[1]["chosen"]
        out["families"] = {n: {k: f[k] for k in ("acc_at_top1", "mrr")} for n, f in new[1]["families"].items()}
        emit(out)


if __name__ == "__main__":
    main()
