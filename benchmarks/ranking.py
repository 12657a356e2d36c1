"""The ranking model against today's default ranking, out of sample: Acc@Top1 single and cross, cross-fitted.

    python benchmarks/ranking.py --queries val.jsonl --oos val_oos.jsonl [--crossfit 5] [--out FILE]
    python benchmarks/ranking.py --combine A.json B.json     # pool several --out files, each question once
    python benchmarks/ranking.py --queries fit.jsonl --heldout apart.jsonl  # fit on one set, rank questions kept apart

Runs in-process on the active versions of $FEDQA_HOME (read only). The questions are cut into K folds exactly as
``benchmarks/quality.py --crossfit K`` cuts them (same seed, same order); for each fold the router's calibration, the
fused parameters and the page prior's weight are refitted on the other folds (``quality.py``'s ``refit``), then every
question's candidate pool is collected through that pipeline (``training/ranking.py`` ``collect``: each question with
the questions sharing its gold left out of the page prior), the ranking model is fitted on the other folds' pools
(``training/ranking.py`` ``fit_weights``, the fit ``fedqa train ranking`` stores) and the fold's questions are ranked
by it (``top_is_gold``: the function serving uses). ``default`` is the served default ranking of the fold's
questions under the same refit (quality.py's ``fused`` row, the same numbers). Beside the model on every feature, the
same fit on subsets of them (``--ablations``) says which parts pay. With a reranker on the home (and FEDQA_RERANK on)
the pools' top ``--rerank-depth`` by the default ranking carry its logit, and ``model-no-reranker`` (the stored fit
without the reranker's two features) says what it adds. ``--combine`` pools the per-question records of
the two faq6 folds' homes (a question held out in both counts once, its figures averaged), as quality.py does.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # quality.py, a sibling script

from service.config import get_settings  # noqa: E402
from service.queries import load_queries  # noqa: E402
from service.ranking.features import DEPTH, FEATURES, RERANK_FEATURES, Feature  # noqa: E402
from service.ranking.model import OBJECTIVE, FittedOn, Objective, RankingMetrics, RankingModel  # noqa: E402

#: the fit ``fedqa train ranking`` stores: every feature, its objective, on the questions as new ones and asked again
MODEL = "model"
#: the same fit without the reranker's features (with a reranker: what its logit adds to the model)
NO_RERANKER = "model-no-reranker"
#: the fits on the questions as new ones and asked again, as ``fedqa train ranking``'s: their feature sets
STORED_FITS: dict[str, tuple[Feature, ...]] = {MODEL: FEATURES, NO_RERANKER: tuple(f for f in FEATURES if f not in RERANK_FEATURES)}
#: the fits compared beside it, on the questions as new ones only: every feature by each objective, and every feature but
#: one group (what that group adds)
ABLATIONS: dict[str, tuple[tuple[Feature, ...], Objective]] = {
    "model-pairwise": (FEATURES, Objective.PAIRWISE),
    "model-softmax": (FEATURES, Objective.SOFTMAX),
    "no-lexical": (tuple(f for f in FEATURES if f not in (Feature.BM25_SHARE, Feature.LEXICAL_ONLY)), OBJECTIVE),
    "no-page-prior": (
        tuple(f for f in FEATURES if f not in (Feature.PAGE_ANSWERS, Feature.IS_KNOWN_ANSWER, Feature.KNOWN_ANSWER, Feature.KNOWN_ANSWER_SQUARED)),
        OBJECTIVE,
    ),
    "no-router": (tuple(f for f in FEATURES if f is not Feature.LOG_PRODUCT_PROBABILITY), OBJECTIVE),
    "no-product-evidence": (tuple(f for f in FEATURES if f is not Feature.DOMAIN_BEST_GAP), OBJECTIVE),
    "s-and-p": ((Feature.SIMILARITY, Feature.LOG_PRODUCT_PROBABILITY), OBJECTIVE),
    "no-reranker-pairwise": (STORED_FITS[NO_RERANKER], Objective.PAIRWISE),
    "no-reranker-softmax": (STORED_FITS[NO_RERANKER], Objective.SOFTMAX),
}
DEFAULT = "default"


def _model(names: tuple[Feature, ...], weights: tuple[float, ...], depth: int) -> RankingModel:
    on = FittedOn(index=None, retriever=None, router=None, data="benchmark", questions=0)
    blank = RankingMetrics(questions=0, folds=0, acc_at_top1=0.0, default_acc_at_top1=0.0, wins=0, losses=0, in_sample_acc_at_top1=0.0)
    return RankingModel(features=names, weights=weights, depth=depth, active=True, fitted_on=on, metrics=blank)


class MemoLogits:
    """A reranker's ``logits`` computing each (question, passage) pair's logit once (the folds' pools share most)."""

    def __init__(self, logits: Callable[[str, Sequence[str]], np.ndarray]) -> None:
        self._logits = logits
        self._seen: dict[tuple[str, str], float] = {}

    def __call__(self, query: str, texts: Sequence[str], **kw: Any) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if (query, t) not in self._seen]
        if new:
            self._seen.update(zip(((query, t) for t in new), self._logits(query, new, **kw).tolist(), strict=True))
        return np.array([self._seen[(query, t)] for t in texts], dtype=np.float32)


def run(args: argparse.Namespace) -> dict:
    """Every question's top-1 under the default and each model, cross-fitted (see the module docstring)."""
    from quality import refit

    from service.loading import load_pipeline
    from service.routing.router import HeadRouter
    from training.ranking import collect, fit_weights, top_is_gold

    qs = [q for f in args.queries for q in load_queries(f) if q.gold_doc_ids and q.domains]
    names = {n: ABLATIONS[n] for n in args.ablations}
    pipeline = load_pipeline(get_settings(), with_llm=False)
    rerank = args.rerank_depth if pipeline.pool_reranker is not None and args.rerank_depth > 0 else None
    if pipeline.reranker is not None:  # each fold's refit ranks the same pairs again: their logits computed once
        pipeline.reranker.logits = MemoLogits(pipeline.reranker.logits)  # type: ignore[method-assign]
    try:
        head = pipeline.router
        if not isinstance(head, HeadRouter):
            raise SystemExit("--crossfit refits a trained router's calibration: this home has none ('fedqa train router')")
        preps = pipeline.prepare_many([q.query for q in qs])
        oos = [q for f in args.oos for q in load_queries(f)]
        oos_vecs = pipeline.encoder.embed_queries([q.query for q in oos]) if oos else np.zeros((0, pipeline.encoder.dim))
        saved = (head.temperature, list(head.bias), head.fitted)
        order = list(range(len(qs)))
        random.Random(args.seed).shuffle(order)  # quality.py's folds
        folds = [sorted(order[i :: args.crossfit]) for i in range(args.crossfit)]
        records: dict[str, dict] = {}
        weights: list[dict] = []
        cached = pickle.loads(Path(args.pools).read_bytes()) if args.pools and Path(args.pools).is_file() else None
        collected = []
        for k, fold in enumerate(folds):
            held = set(fold)
            rest = [i for i in range(len(qs)) if i not in held]
            scored = {d for i in fold for d in qs[i].gold_doc_ids}
            if cached is not None:
                items, again = cached[k]
            else:
                refit(pipeline, [qs[i] for i in rest], [preps[i] for i in rest], oos_vecs, args.top_k, saved[2].page_prior, scored)
                items = collect(pipeline, qs, args.depth, rerank_depth=rerank)  # with this fold's refit: the others to fit on, the fold to score
                again = collect(pipeline, [qs[i] for i in rest], args.depth, asked_again=True, rerank_depth=rerank)  # the others asked again
                collected.append((items, again))
            train = [items[i] for i in rest]
            fold_weights = {}
            stored = [(n, (feats, Objective(args.objective), train + again)) for n, feats in STORED_FITS.items()]
            for n, (feats, objective, fit_on) in stored + [(n, (*a, train)) for n, a in names.items()]:
                w = fit_weights(fit_on, feats, objective)
                fold_weights[n] = dict(zip(map(str, feats), w, strict=True))
                m = _model(feats, w, args.depth)
                for i in fold:
                    records.setdefault(qs[i].qid, {"qid": qs[i].qid, "domains": list(qs[i].domains), "cross": qs[i].is_cross})[n] = float(
                        top_is_gold(m, items[i])
                    )
            for i in fold:
                records[qs[i].qid][DEFAULT] = float(items[i].default_top1)
            weights.append(fold_weights)
        head.temperature, head.bias, head.fitted = saved
        versions = pipeline.versions
        if args.pools and cached is None:
            Path(args.pools).write_bytes(pickle.dumps(collected))
    finally:
        pipeline.close()
    return {
        "queries": list(args.queries),
        "n": len(qs),
        "crossfit": args.crossfit,
        "depth": args.depth,
        "rerank_depth": rerank,
        "versions": versions,
        "fold_weights": weights,
        "records": list(records.values()),
    }


def heldout(args: argparse.Namespace) -> dict:
    """Fit on every question of ``--queries`` (as ``fedqa train ranking`` does, the stored router as it is) and rank the
    questions of ``--heldout``, kept apart from the router and the fit, beside the served default on them."""
    from service.loading import load_pipeline
    from training.ranking import collect, fit_weights, top_is_gold

    fit_qs = [q for f in args.queries for q in load_queries(f) if q.gold_doc_ids and q.domains]
    apart = [q for f in args.heldout for q in load_queries(f) if q.gold_doc_ids and q.domains]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    rerank = args.rerank_depth if pipeline.pool_reranker is not None and args.rerank_depth > 0 else None
    try:
        fit_items = collect(pipeline, fit_qs, args.depth, rerank_depth=rerank)
        repeated = collect(pipeline, fit_qs, args.depth, asked_again=True, rerank_depth=rerank)  # as fedqa train ranking fits
        items = collect(pipeline, apart, args.depth, rerank_depth=rerank)
        versions = pipeline.versions
    finally:
        pipeline.close()
    records = [{"qid": q.qid, "domains": list(q.domains), "cross": q.is_cross} for q in apart]
    weights = {}
    arms = [(n, (feats, Objective(args.objective), fit_items + repeated)) for n, feats in STORED_FITS.items()]
    arms += [(n, (*ABLATIONS[n], fit_items)) for n in args.ablations]
    for n, (feats, objective, fit_on) in arms:
        w = fit_weights(fit_on, feats, objective)
        weights[n] = dict(zip(map(str, feats), w, strict=True))
        m = _model(feats, w, args.depth)
        for r, it in zip(records, items, strict=True):
            r[n] = float(top_is_gold(m, it))
    for r, it in zip(records, items, strict=True):
        r[DEFAULT] = float(it.default_top1)
    return {
        "queries": list(args.queries),
        "heldout": list(args.heldout),
        "n": len(apart),
        "depth": args.depth,
        "rerank_depth": rerank,
        "versions": versions,
        "weights": weights,
        "records": records,
    }


def table(records: list[dict], out=sys.stdout) -> dict:  # noqa: ANN001
    """Mean Acc@Top1 per ranking and group (all, single, cross), with each model's wins and losses against the default."""
    rankings = [k for k in records[0] if k not in ("qid", "domains", "cross")]
    summary: dict = {}
    print(f"{'ranking':<28}{'all':>8}{'single':>8}{'cross':>8}{'n':>6}{'wins':>6}{'losses':>7}", file=out)
    for r in rankings:
        groups = {"all": records, "single": [x for x in records if not x["cross"]], "cross": [x for x in records if x["cross"]]}
        means = {g: round(float(np.mean([x[r] for x in rows])), 4) if rows else None for g, rows in groups.items()}
        wins = sum(1 for x in records if x[r] > x[DEFAULT])
        losses = sum(1 for x in records if x[r] < x[DEFAULT])
        summary[r] = {**means, "n": len(records), "wins": wins, "losses": losses}
        cells = "".join(f"{'-' if means[g] is None else format(means[g], '.3f'):>8}" for g in ("all", "single", "cross"))
        print(f"{r:<28}{cells}{len(records):>6}{wins:>6}{losses:>7}", file=out)
    return summary


def combine(paths: list[str]) -> tuple[list[dict], list[str]]:
    """The per-question records of several ``--out`` files, a question held out in more than one averaged."""
    by: dict[str, list[dict]] = defaultdict(list)
    for p in paths:
        for r in json.loads(Path(p).read_text(encoding="utf-8"))["records"]:
            by[r["qid"]].append(r)
    out = []
    for qid, rows in by.items():
        keys = [k for k in rows[0] if k not in ("qid", "domains", "cross")]
        out.append({"qid": qid, "domains": rows[0]["domains"], "cross": rows[0]["cross"], **{k: float(np.mean([r[k] for r in rows])) for k in keys}})
    return out, [q for q, rows in by.items() if len(rows) > 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", nargs="+", help="labelled questions (queries.jsonl format): the router's validation questions")
    ap.add_argument("--oos", nargs="*", default=[], help="out-of-scope questions for the calibration refit")
    ap.add_argument("--combine", nargs="+", metavar="FILE", help="pool the per-question records of these --out files instead")
    ap.add_argument("--crossfit", type=int, default=5, help="K folds (quality.py's)")
    ap.add_argument("--depth", type=int, default=DEPTH, help="the pool's depth per searched product")
    ap.add_argument(
        "--rerank-depth",
        type=int,
        default=get_settings().rank_rerank_depth,
        help="with a reranker on the home, its logit as a feature of each pool's top N by the default ranking (0: not read)",
    )
    ap.add_argument("--top-k", type=int, default=5, help="as quality.py (the refit's ranking depth)")
    ap.add_argument("--ablations", nargs="+", default=list(ABLATIONS), choices=list(ABLATIONS), help="the feature sets fitted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--objective", choices=[o.value for o in Objective], default=OBJECTIVE.value, help="the stored fits' objective (fedqa train ranking's)"
    )
    ap.add_argument("--heldout", nargs="+", help="fit on every --queries question and rank these questions kept apart instead of cross-fitting")
    ap.add_argument("--pools", help="a file keeping each fold's collected pools: written when absent, read (no refit) when there")
    ap.add_argument("--out", help="write the per-question records and the summary as JSON here")
    args = ap.parse_args(argv)
    if args.combine:
        records, twice = combine(args.combine)
        summary = table(records)
        print(f"{len(records)} questions; {len(twice)} held out in more than one file (their figures averaged)")
        if args.out:
            Path(args.out).write_text(json.dumps({"combined": args.combine, "summary": summary, "records": records}, indent=2), encoding="utf-8")
        return 0
    if not args.queries:
        ap.error("give --queries (or --combine)")
    result = heldout(args) if args.heldout else run(args)
    result["summary"] = table(result["records"])
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
