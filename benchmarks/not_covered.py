""""Not covered" leave-one-product-out: fit the decision without a product's questions, score that product's.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/not_covered.py --in-scope $DATA/val.jsonl \
        --oos ../shared/data/oos_dev.jsonl ../shared/data/oos_family_dev.jsonl --named ../shared/data/oos_family_dev_named.jsonl

Runs in-process on the active versions of $FEDQA_HOME (the serving path's evidence: router probabilities, best s,
the quoted span's score and, with a trained reranker, its best calibrated score). For every out-of-scope product
P (the ``product`` field): the decision is fitted as ``fedqa train router`` fits it (training/abstention.py: features
chosen by k-fold, threshold at ``--false-refusal`` of the in-scope fitting questions) on the in-scope questions of
the other folds, the out-of-scope questions of every other product and the general ones shipped with the package;
then P's questions (all, and those that name P) and the held-out in-scope fold are scored. Each in-scope question
and each of P's questions is scored by a model that never saw it, and ``nearest_out`` reads the questions that fit knows
(the in-scope ones and the out-of-scope ones but P's, each question's own text left out): P's questions are never
among them, as a product no curator marked. ``no out-of-scope file`` is the same with the
shipped general questions alone: what a home without an out-of-scope file gets. ``--without F...``: the same again
with each feature F held constant (left out of the fit), to see what it adds; the rows say which. Several
``--false-refusal`` targets compare feature sets at the same held-out in-scope refusal rate (one evidence pass).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.config import get_settings  # noqa: E402
from service.generation.abstention import FEATURES  # noqa: E402
from service.generation.asked import leave_one_out  # noqa: E402
from service.queries import load_queries  # noqa: E402
from training.abstention import SOURCED, choose_features, confidences, fit  # noqa: E402
from training.data.general import general_negatives  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402


def _rates(ev_in: np.ndarray, ev_out: np.ndarray, target: np.ndarray, *, false_refusal: float, folds: int, seed: int) -> tuple[float, np.ndarray]:
    """k-fold over the in-scope questions: (in-scope refusal rate, per-target-question refused share over the folds)."""
    refused_in = 0
    refused_target = np.zeros(len(target))
    splits = assigned_folds(permuted_folds(len(ev_in), folds, np.random.default_rng(seed)))
    for train, test in splits:
        feats = choose_features(ev_in[train], ev_out, false_refusal=false_refusal, folds=folds, seed=seed)["features"]
        model = fit(ev_in[train], ev_out, false_refusal=false_refusal, features=feats)
        refused_in += int((confidences(model, ev_in[test]) < model.threshold).sum())
        if len(target):
            refused_target += confidences(model, target) < model.threshold
    return refused_in / len(ev_in), refused_target / max(1, len(splits))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-scope", nargs="+", required=True, help="in-scope questions (the router's validation split)")
    ap.add_argument("--oos", nargs="+", required=True, help="out-of-scope questions with a 'product' field")
    ap.add_argument("--named", nargs="*", default=[], help="the out-of-scope questions that name their product (qids)")
    ap.add_argument("--false-refusal", type=float, nargs="+", default=[0.03], help="the fit's in-scope refusal target(s)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the table as JSON here")
    ap.add_argument("--without", nargs="*", default=[], choices=SOURCED, help="also fit without each of these features")
    args = ap.parse_args(argv)

    from service.loading import load_pipeline
    from training.abstention import question_evidence

    in_scope = [q for f in args.in_scope for q in load_queries(f) if q.domains]
    oos = [q for f in args.oos for q in load_queries(f)]
    named = {q.qid for f in args.named for q in load_queries(f)}
    products = _products(args.oos)
    general = general_negatives()
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        q_in = question_evidence(pipeline, [q.query for q in in_scope], gold=[q.gold_doc_ids for q in in_scope])
        q_oos = question_evidence(pipeline, [q.query for q in oos])
        q_gen = question_evidence(pipeline, [q.query for q in general])
        versions = pipeline.versions
    finally:
        pipeline.close()
    (ev_in, v_in, t_in), (ev_oos, v_oos, t_oos), (ev_gen, v_gen, t_gen) = ((e.rows, e.vectors, e.texts) for e in (q_in, q_oos, q_gen))
    p_in, p_oos, p_gen = q_in.parts, q_oos.parts, q_gen.parts  # each question's questions' vectors: what its own value reads
    rows = []
    by_product: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(oos):
        by_product[products.get(q.qid, "?")].append(i)
    is_named = np.array([q.qid in named for q in oos])
    for target, without in ((t, w) for t in args.false_refusal for w in [None, *args.without]):
        kw = {"false_refusal": target, "folds": args.folds, "seed": args.seed}
        e_in, e_oos, e_gen = (_held_constant(e, without) for e in (ev_in, ev_oos, ev_gen))
        suffix = "" if without is None else f", without {without}"
        nearest = _nearest if without != "nearest_out" else lambda e, *_: e  # held at 0 when left out
        # nearest_out against the questions each fit knows (its in-scope and out-of-scope sides), as the fit stores them
        known_in = (v_in, t_in)
        g_in, g_gen, g_oos = (
            nearest(e, p, t, known_in, (v_gen, t_gen)) for e, p, t in ((e_in, p_in, t_in), (e_gen, p_gen, t_gen), (e_oos, p_oos, t_oos))
        )
        general_fr, general_refused = _rates(g_in, g_gen, g_oos, **kw)  # the same fit whichever product is left out
        for product, idx in sorted(by_product.items()):
            rest = np.setdiff1d(np.arange(len(oos)), idx)
            known_out = (np.vstack([v_oos[rest], v_gen]), [t_oos[i] for i in rest] + t_gen)
            l_in, l_oos = (nearest(e, p, t, known_in, known_out) for e, p, t in ((e_in, p_in, t_in), (e_oos, p_oos, t_oos)))
            l_gen = nearest(e_gen, p_gen, t_gen, known_in, known_out)
            fr, refused = _rates(l_in, np.vstack([l_oos[rest], l_gen]), l_oos[idx], **kw)
            rows.append(_row(product, "leave one product out" + suffix, target, fr, refused, is_named[idx]))
            rows.append(_row(product, "no out-of-scope file" + suffix, target, general_fr, general_refused[idx], is_named[idx]))
    _print(rows)
    _summary(rows)
    if args.out:
        Path(args.out).write_text(
            json.dumps({"versions": versions, "in_scope": len(in_scope), "rows": rows, **vars(args)}, indent=2), encoding="utf-8"
        )
    return 0


def _nearest(
    evidence: np.ndarray, parts: list[np.ndarray], texts: list[str], inside: tuple[np.ndarray, list[str]], outside: tuple[np.ndarray, list[str]]
) -> np.ndarray:
    """``evidence`` with its ``nearest_out`` against the known questions ``inside`` and ``outside`` (each question's
    questions' vectors ``parts``, its own text left out: :func:`service.generation.asked.leave_one_out`)."""
    out = evidence.copy()
    out[:, FEATURES.index("nearest_out")] = leave_one_out(parts, texts, inside[0], inside[1], outside[0], outside[1])
    return out


def _held_constant(evidence: np.ndarray, feature: str | None) -> np.ndarray:
    """``evidence`` with ``feature``'s column set to 0 (a constant sourced feature is left out of the fit)."""
    if feature is None:
        return evidence
    out = evidence.copy()
    out[:, FEATURES.index(feature)] = 0.0
    return out


def _products(paths: list[str]) -> dict[str, str]:
    """qid -> product of the out-of-scope files."""
    out = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                out[str(rec.get("qid"))] = str(rec.get("product", "?"))
    return out


def _row(product: str, setting: str, target: float, false_refusal: float, refused: np.ndarray, is_named: np.ndarray) -> dict:
    return {
        "product": product,
        "setting": setting,
        "target": target,
        "questions": int(len(refused)),
        "not_covered": round(float(refused.mean()), 4) if len(refused) else None,
        "named": int(is_named.sum()),
        "not_covered_named": round(float(refused[is_named].mean()), 4) if is_named.any() else None,
        "in_scope_refused": round(false_refusal, 4),
    }


def _print(rows: list[dict]) -> None:
    print(f"{'product':<12}{'setting':<48}{'target':>7}{'n':>5}{'not covered':>13}{'named n':>9}{'named':>8}{'in-scope refused':>18}")
    for r in rows:
        named = "-" if r["not_covered_named"] is None else f"{r['not_covered_named']:.3f}"
        print(
            f"{r['product']:<12}{r['setting']:<48}{r['target']:>7.3f}{r['questions']:>5}{r['not_covered']:>13.3f}{r['named']:>9}{named:>8}"
            f"{r['in_scope_refused']:>18.3f}"
        )


def _summary(rows: list[dict]) -> None:
    """Per setting and target: the mean share of named questions refused over the products that have them, how many
    of those products reach 0.80, and the mean in-scope refusal rate."""
    groups: dict[tuple[str, float], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["setting"], r["target"])].append(r)
    print(f"\n{'setting':<48}{'target':>7}{'named mean':>12}{'>= 0.80':>9}{'in-scope refused':>18}")
    for (setting, target), rs in groups.items():
        named = [r["not_covered_named"] for r in rs if r["not_covered_named"] is not None]
        mean_in = float(np.mean([r["in_scope_refused"] for r in rs]))
        reached = f"{sum(v >= 0.8 for v in named)}/{len(named)}"
        print(f"{setting:<48}{target:>7.3f}{float(np.mean(named)) if named else float('nan'):>12.3f}{reached:>9}{mean_in:>18.3f}")


if __name__ == "__main__":
    sys.exit(main())
