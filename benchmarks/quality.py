"""Retrieval quality of every strategy on labelled questions: Acc@Top1, Recall@k, MRR and routing accuracy,
per strategy, single vs cross and per domain, with 95% bootstrap intervals; beside Acc@1, the answers by product
(the router version's fitted split rule, service/routing/split.py): "hit by product" (the gold passage is the top
passage of one of the products shown; one product: Acc@1), products shown per question and the share of questions
answered for one product.

    python benchmarks/quality.py --queries val.jsonl [more.jsonl] [--crossfit 5 --oos val_oos.jsonl] [--out FILE]
    python benchmarks/quality.py --combine A.json B.json      # pool the questions of several --out files

Runs in-process on the active versions of $FEDQA_HOME (deterministic gate; the embedded store must not
be open in a running service). ``oracle`` searches each question's own gold domains (the product
filter), an upper bound for routing.

``--crossfit K``: the router version's temperature and fused parameters were fitted on its validation
split; to score questions of that split without scoring a question with parameters fitted on it, the
questions are cut into K folds and, for each fold, the calibration (temperature and per-domain biases, with the ``--oos`` questions) and
the fused parameters are refitted on the other folds (training/calibration.py, training/fusion.py), and the page
prior's weight and depth (training/page_prior.py; its counts are of the training split, which these questions are not
in), then the fold is scored with every strategy. Without it the stored parameters are used (for questions
kept apart from training and fitting).

``--combine``: the per-question records of several ``--out`` files (e.g. the two folds of the refresh flow:
``fedqa data build --val-fraction 0.5`` in one home, ``... --val-complement`` in another, each scored on its own
``val.jsonl``) pooled into one table, so that every labelled question counts once.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.config import get_settings  # noqa: E402
from service.evaluation.retrieval_metrics import ranking_scores  # noqa: E402
from service.evaluation.stats import group_means  # noqa: E402
from service.queries import LabelledQuery, load_queries  # noqa: E402
from service.retrieval.federated import search_domains  # noqa: E402
from service.routing.router import HeadRouter  # noqa: E402

ORACLE = "oracle"
RERANK = "+rerank"


def score(pipeline, q: LabelledQuery, prepared, strategy: str, top_k: int) -> dict:  # noqa: ANN001
    """One question's metrics under one strategy (``oracle``: its gold domains as the product filter; a ``+rerank``
    suffix: the reranker reorders the strategy's ranking, which otherwise is scored as the strategy made it)."""
    name, rerank = strategy.removesuffix(RERANK), strategy.endswith(RERANK)
    if name == ORACLE:
        ret = pipeline.retrieve(q.query, top_k=top_k, prepared=prepared, domains=[d for d in q.domains if d in pipeline.domains], rerank=rerank)
    else:
        ret = pipeline.retrieve(q.query, top_k=top_k, gate_mode="deterministic", strategy=name, prepared=prepared, rerank=rerank)
    ranked = [h.passage.doc_id for h in ret.hits]
    scores = ranking_scores(ranked, q.gold_doc_ids, ret.routing.active_domains, q.domains, top_k)
    groups = pipeline.by_product(ret, top_k=top_k, rerank=rerank)
    tops = [g.retrieval.hits[0].passage.doc_id for g in groups if g.retrieval.hits]
    scores["hit_by_product"] = float(any(t in q.gold_doc_ids for t in tops)) if groups else scores["acc_at_top1"]
    scores["groups"] = float(max(1, len(groups)))
    scores["one_group"] = float(len(groups) <= 1)
    return {n: scores[n] for n in metric_names(top_k)}


def refit(pipeline, fit_qs: list[LabelledQuery], fit_preps: list, oos_vecs: np.ndarray, top_k: int, prior, scored: set[str]) -> dict:  # noqa: ANN001
    """Temperature and fused parameters refitted on ``fit_qs`` (+ out-of-scope vectors), and the stored page ``prior``
    without the questions answered by ``scored`` (the gold doc_ids of the questions to score); set on the pipeline's
    router."""
    from training.calibration import fit_calibration
    from training.fusion import FitQuestion, fit_fusion
    from training.page_prior import DEPTH_GRID, Pages, fit_page_prior, prior_questions
    from training.router_data import label_matrix

    router, domains = pipeline.router, pipeline.domains
    vecs = np.stack([p.vector for p in fit_preps] + list(oos_vecs)) if len(oos_vecs) else np.stack([p.vector for p in fit_preps])
    labels = label_matrix(fit_qs + [LabelledQuery(f"oos{i}", "", []) for i in range(len(oos_vecs))], router.domains)
    cal = fit_calibration(router.raw_logits(vecs), labels)
    router.temperature, router.bias = cal.temperature, list(cal.bias)
    k = router.fitted.fusion.evidence_k if router.fitted.fusion is not None else 20
    fit = []
    for q, prep in zip(fit_qs, fit_preps, strict=True):
        p = router.predict_vectors(prep.vector)[0]
        probs = {d: float(p[router.domains.index(d)]) for d in domains}
        fit.append(
            FitQuestion(
                np.array([probs[d] for d in domains]),
                search_domains(pipeline.store, prep.vector, domains, max(k, top_k, *DEPTH_GRID))[0],
                list(q.domains),
                set(q.gold_doc_ids),
                prep.vector,
            )
        )
    params, _ = fit_fusion(fit, domains, top_k=top_k, evidence_k=k)
    router.fitted = replace(router.fitted, fusion=params)
    rounded = {k2: round(v, 4) if isinstance(v, float) else v for k2, v in params.as_dict().items()}
    if prior is not None:  # without the scored questions' answers; the weight and depth refitted on the others
        prior, _ = fit_page_prior(prior_questions(fit, domains, params), Pages.of(prior.without(scored)))
        router.fitted = replace(router.fitted, page_prior=prior)
        rounded.update(page_prior_weight=prior.weight, page_prior_depth=prior.depth, page_prior_questions=len(prior.answers))
        rounded.update(page_prior_penalty=prior.penalty, page_prior_match=prior.match)
    return {
        "temperature": round(cal.temperature, 4),
        "calibration_bias": [round(b, 3) for b in cal.bias],
        **rounded,
        **refit_rerank(pipeline, fit_qs),
    }


_LOGITS: dict[tuple[str, str], float] = {}


def refit_rerank(pipeline, fit_qs: list[LabelledQuery]) -> dict:  # noqa: ANN001
    """The reranker's combination (weight, depth) refitted on ``fit_qs`` (single-product ones, with the rankings the
    refitted strategy serves them), as ``fedqa train reranker`` fits it on its validation questions; set on the
    pipeline. The cross-encoder itself never saw these questions (trained on the training split)."""
    from training.reranker_data import with_candidates
    from training.reranker_fit import fit_combination

    if pipeline.reranker is None:
        return {}
    reranker = pipeline.reranker
    single = [q for q in fit_qs if not q.is_cross]
    cands = with_candidates(pipeline, single, ["labelled"] * len(single), depth=30, passages=None, titles=reranker.params.titles)
    ces = []
    for c in cands:
        missing = [t for t in c.texts if (c.query, t) not in _LOGITS]
        _LOGITS.update({(c.query, t): float(v) for t, v in zip(missing, reranker.logits(c.query, missing), strict=True)})
        ces.append(np.array([_LOGITS[(c.query, t)] for t in c.texts]))
    fit = fit_combination(cands, ces, max_depth=30)
    pipeline.reranker = reranker.with_params(replace(reranker.params, weight=fit.weight, depth=fit.depth))
    return {"rerank_weight": fit.weight, "rerank_depth": fit.depth}


def metric_names(top_k: int) -> list[str]:
    """The metrics this benchmark reports (evaluation's retrieval group but routing_exact), in table order."""
    return ["acc_at_top1", "hit_by_product", "groups", "one_group", f"recall_at_{top_k}", "mrr", "routing_accuracy", "domains_searched"]


def groups(q: LabelledQuery) -> list[str]:
    return ["all", "cross" if q.is_cross else "single"] + [f"domain:{d}" for d in q.domains]


def summarize(records: list[tuple[str, LabelledQuery, dict]], strategies: list[str], top_k: int) -> dict:
    """Means and 95% intervals per strategy and group."""
    by: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for s, q, m in records:
        for g in groups(q):
            by[s][g].append(m)
    names = [n for n in metric_names(top_k) if all(n in m for _, _, m in records)]  # files of an older quality.py lack the by-product ones
    out: dict = {}
    for s in strategies:
        order = [g for g in ("all", "single", "cross") if g in by[s]] + sorted(g for g in by[s] if g.startswith("domain:"))
        aggs = group_means({g: by[s][g] for g in order}, names, digits=4)
        out[s] = {g: {"n": len(by[s][g]), **{n: {"mean": a["mean"], "ci95": a["ci95"]} for n, a in aggs[g].items()}} for g in order}
    return out


def print_table(summary: dict, top_k: int, out=sys.stdout) -> None:  # noqa: ANN001
    first: dict = next((m for per in summary.values() for m in per.values()), {})
    cols = [c for c in ("acc_at_top1", "hit_by_product", f"recall_at_{top_k}", "mrr") if c in first]
    by_product = "groups" in first
    head = "".join(f"{c + ' [95% CI]':>27}" for c in cols) + (f"{'groups':>8}{'one':>7}" if by_product else "")
    print(f"{'strategy':<14}{'group':<19}{'n':>4}" + head + f"{'routing':>9}{'searched':>9}", file=out)
    for s, per in summary.items():
        for g, m in per.items():
            cells = "".join(f"{m[c]['mean']:>8.3f} [{m[c]['ci95'][0]:.3f}, {m[c]['ci95'][1]:.3f}]".rjust(27) for c in cols)
            if by_product:
                cells += f"{m['groups']['mean']:>8.2f}{m['one_group']['mean']:>7.2f}"
            route = m["routing_accuracy"]["mean"]
            print(
                f"{s:<14}{g:<19}{m['n']:>4}{cells}{'-' if route is None else format(route, '.3f'):>9}{m['domains_searched']['mean']:>9.2f}", file=out
            )


def record_rows(records: list[tuple[str, LabelledQuery, dict]]) -> list[dict]:
    """Per-question rows of ``--out`` (what ``--combine`` pools)."""
    return [{"strategy": s, "qid": q.qid, "domains": list(q.domains), **m} for s, q, m in records]


def combine(paths: list[str], out: str | None) -> int:
    """Pool the per-question records of several ``--out`` files. A question held out in more than one of them (a
    joined cross question whose parts fell in different folds) counts once, with each metric averaged over them."""
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    strategies: list[str] = []
    top_k: int | None = None
    for path in paths:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
        if "records" not in result:
            raise SystemExit(f"{path} has no per-question records (written by an older quality.py)")
        top_k = top_k or result["top_k"]
        if result["top_k"] != top_k:
            raise SystemExit(f"{path}: top_k {result['top_k']} differs from {top_k}")
        for r in result["records"]:
            by[(r["strategy"], r["qid"])].append(r)
        strategies += [s for s in result["results"] if s not in strategies]
    if top_k is None:
        raise SystemExit("no files to combine")
    keys = ("strategy", "qid", "domains")
    records = []
    for (strategy, qid), rows in by.items():
        metrics = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k not in keys}
        records.append((strategy, LabelledQuery(qid, "", rows[0]["domains"]), metrics))
    summary = summarize(records, strategies, top_k)
    print_table(summary, top_k)
    n, twice = len({qid for _, qid in by}), len({qid for (_, qid), rows in by.items() if len(rows) > 1})
    print(f"{n} questions; {twice} held out in more than one file (their metrics averaged)")
    if out:
        pooled = {"combined": paths, "n": n, "in_several_files": twice, "top_k": top_k, "results": summary}
        Path(out).write_text(json.dumps(pooled, indent=2), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", nargs="+", help="labelled questions (queries.jsonl format)")
    ap.add_argument("--combine", nargs="+", metavar="FILE", help="pool the per-question records of these --out files instead")
    ap.add_argument("--strategies", default="fused,fused+rerank,mkpqa,uis,uis+rerank,rfs,oracle", help="'+rerank': with the active reranker")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--crossfit", type=int, default=0, help="K folds: refit calibration and fused parameters on the other folds")
    ap.add_argument("--oos", nargs="*", default=[], help="out-of-scope questions for the temperature refit (with --crossfit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the summary as JSON here")
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)
    if not args.queries:
        ap.error("give --queries (or --combine)")

    from service.loading import load_pipeline

    qs = [q for f in args.queries for q in load_queries(f) if q.gold_doc_ids and q.domains]
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    if pipeline.reranker is None:
        strategies = [s for s in strategies if not s.endswith(RERANK)]
    try:
        preps = pipeline.prepare_many([q.query for q in qs])
        head = pipeline.router if isinstance(pipeline.router, HeadRouter) else None
        folds = [list(range(len(qs)))]
        fitted: list[dict] = []
        if args.crossfit > 1:
            order = list(range(len(qs)))
            random.Random(args.seed).shuffle(order)
            folds = [sorted(order[i :: args.crossfit]) for i in range(args.crossfit)]
            oos = [q for f in args.oos for q in load_queries(f)]
            oos_vecs = pipeline.encoder.embed_queries([q.query for q in oos]) if oos else np.zeros((0, pipeline.encoder.dim))
            if head is None:
                raise SystemExit("--crossfit refits a trained router's calibration: this home has none ('fedqa train router')")
            saved = (head.temperature, list(head.bias), head.fitted, pipeline.reranker)
        records = []
        for fold in folds:
            if args.crossfit > 1:
                rest = [i for i in range(len(qs)) if i not in set(fold)]
                scored = {d for i in fold for d in qs[i].gold_doc_ids}
                fit_qs, fit_preps = [qs[i] for i in rest], [preps[i] for i in rest]
                fitted.append(refit(pipeline, fit_qs, fit_preps, oos_vecs, args.top_k, saved[2].page_prior, scored))
                fold_preps = pipeline.prepare_many([qs[i].query for i in fold])  # probabilities with this fold's temperature
            else:
                fold_preps = [preps[i] for i in fold]
            for i, prep in zip(fold, fold_preps, strict=True):
                for s in strategies:
                    records.append((s, qs[i], score(pipeline, qs[i], prep, s, args.top_k)))
        if args.crossfit > 1 and head is not None:
            head.temperature, head.bias, head.fitted, pipeline.reranker = saved
        summary = summarize(records, strategies, args.top_k)
        result = {
            "queries": [str(f) for f in args.queries],
            "n": len(qs),
            "top_k": args.top_k,
            "versions": pipeline.versions,
            "crossfit": args.crossfit,
            "fold_params": fitted,
            "results": summary,
            "records": record_rows(records),
        }
    finally:
        pipeline.close()
    print_table(summary, args.top_k)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
