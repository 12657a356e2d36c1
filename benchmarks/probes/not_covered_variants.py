"""Probe: forms of the "what the first passage leaves unsaid" evidence, models and thresholds, leave one product out.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/not_covered_variants.py --in-scope $DATA/val.jsonl \
        --oos ../shared/data/oos_dev.jsonl ../shared/data/oos_family_dev.jsonl --named ../shared/data/oos_family_dev_named.jsonl

Every question goes through the serving path once (training/abstention.py's ``collect_evidence`` settings: default
strategy, deterministic gate, the page prior without the question's own answer), keeping its evidence and its first
passages. Beside the six features served before ``uncovered`` (``base``), one column is added at a time: the served
``uncovered`` (specificity-weighted share of the question's words the first passage does not hold), the largest
specificity of an unsaid word (``max_unsaid``), the weighted share over the first 3 passages (``share_top3``) and the
unweighted share over the first (``unweighted``); then, over base + uncovered, a second-degree logistic model
(``poly2``), gradient boosting (``gbm``) and the threshold read from out-of-fold in-scope confidences (``oof``)
instead of in sample. Each is scored as ``benchmarks/not_covered.py`` scores the served decision, without its
feature choice: per left-out product, 5 in-scope folds, the other products' and the shipped general questions as
negatives. Prints one line per variant and target: held-out in-scope refusal, mean share of named questions refused,
products at 0.80, and the share per product.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from not_covered import _products  # noqa: E402  (benchmarks/not_covered.py: qid -> product of the out-of-scope files)

from service.config import get_settings  # noqa: E402
from service.generation.abstention import FEATURES  # noqa: E402
from service.queries import load_queries  # noqa: E402
from service.retrieval.strategies import DEFAULT_STRATEGY  # noqa: E402
from service.retrieval.vocabulary import Vocabulary, passage_terms  # noqa: E402
from training.data.general import general_negatives  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402
from training.page_prior import unseen  # noqa: E402

BASE = [f for f in FEATURES if f != "uncovered"]
Scorer = Callable[[np.ndarray], np.ndarray]


def _columns(vocab: Vocabulary, question: str, passages: Sequence[str]) -> list[float]:
    """max_unsaid, share_top3, unweighted for one question and its ranked passages' texts."""
    words = passage_terms(question)
    first = passage_terms(passages[0]) if passages else set()
    unsaid = [vocab.specificity(w) for w in words if w not in first]
    return [max(unsaid, default=0.0), vocab.uncovered([question], passages[:3]), len(unsaid) / max(1, len(words))]


def _collect(pipeline, queries, gold: bool) -> np.ndarray:  # noqa: ANN001
    rows = []
    for q in queries:
        prep = pipeline.prepare_many([q.query])[0]
        with unseen(pipeline, q.gold_doc_ids if gold else ()):
            ret = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic", strategy=DEFAULT_STRATEGY.value, prepared=prep)
        ev, _ = pipeline.answerer.evidence(ret.parts, ret.hits, ret.routing.probabilities, score_sentences=True)
        texts = [f"{h.passage.title} {h.passage.text}" for h in ret.hits]
        rows.append(ev.vector(FEATURES) + _columns(pipeline.answerer.vocabulary, q.query, texts))
    return np.asarray(rows, dtype=np.float64)


def _fit(x_in: np.ndarray, x_out: np.ndarray, model: str) -> Scorer:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    x, y = np.vstack([x_in, x_out]), np.r_[np.ones(len(x_in)), np.zeros(len(x_out))]
    if model == "gbm":
        clf = make_pipeline(StandardScaler(), HistGradientBoostingClassifier(max_depth=3, max_iter=200, learning_rate=0.05, class_weight="balanced"))
    elif model == "poly2":
        poly = PolynomialFeatures(2, include_bias=False)
        clf = make_pipeline(StandardScaler(), poly, LogisticRegression(class_weight="balanced", max_iter=5000, C=0.3))
    else:
        clf = make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=1000))
    clf.fit(x, y)
    return lambda z: clf.predict_proba(z)[:, 1]


def _decision(x_in: np.ndarray, x_out: np.ndarray, target: float, model: str, oof: bool) -> tuple[Scorer, float]:
    score = _fit(x_in, x_out, model)
    conf = score(x_in)
    if oof:  # each in-scope fitting question scored by a model fitted without its fold
        for train, test in assigned_folds(permuted_folds(len(x_in), 5, np.random.default_rng(0))):
            conf[test] = _fit(x_in[train], x_out, model)(x_in[test])
    return score, float(np.quantile(conf, target, method="lower"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-scope", nargs="+", required=True)
    ap.add_argument("--oos", nargs="+", required=True)
    ap.add_argument("--named", nargs="*", default=[])
    ap.add_argument("--false-refusal", type=float, nargs="+", default=[0.02, 0.03])
    args = ap.parse_args()
    from service.loading import load_pipeline

    in_scope = [q for f in args.in_scope for q in load_queries(f) if q.domains]
    oos = [q for f in args.oos for q in load_queries(f)]
    named = {q.qid for f in args.named for q in load_queries(f)}
    product = _products(args.oos)
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        x_in, x_oos, x_gen = _collect(pipeline, in_scope, True), _collect(pipeline, oos, False), _collect(pipeline, general_negatives(), False)
    finally:
        pipeline.close()
    names = list(FEATURES) + ["max_unsaid", "share_top3", "unweighted"]
    base = [names.index(f) for f in BASE]
    variants = [("base", base, "logistic", False)]
    variants += [(f"base + {c}", base + [names.index(c)], "logistic", False) for c in ("uncovered", "max_unsaid", "share_top3", "unweighted")]
    served = base + [names.index("uncovered")]
    variants += [("base + uncovered, poly2", served, "poly2", False), ("base + uncovered, gbm", served, "gbm", False)]
    variants += [("base + uncovered, oof threshold", served, "logistic", True)]
    products = sorted({product[q.qid] for q in oos})
    splits = assigned_folds(permuted_folds(len(x_in), 5, np.random.default_rng(0)))
    for target in args.false_refusal:
        for label, cols, model, oof in variants:
            refused_in, shares = 0, {}
            for p in products:
                mine = np.array([product[q.qid] == p for q in oos])
                neg = np.vstack([x_oos[~mine], x_gen])[:, cols]
                hit = np.zeros(int(mine.sum()))
                for train, test in splits:
                    score, threshold = _decision(x_in[train][:, cols], neg, target, model, oof)
                    refused_in += int((score(x_in[test][:, cols]) < threshold).sum())
                    hit += score(x_oos[mine][:, cols]) < threshold
                is_named = np.array([q.qid in named for q, m in zip(oos, mine, strict=True) if m])
                if is_named.any():
                    shares[p] = float((hit / len(splits))[is_named].mean())
            mean = float(np.mean(list(shares.values()))) if shares else float("nan")
            per = " ".join(f"{p} {v:.3f}" for p, v in shares.items())
            fr = refused_in / (len(x_in) * len(products))
            reached = f"{sum(v >= 0.8 for v in shares.values())}/{len(shares)}"
            print(f"{target:.2f}  {label:<34} in-scope refused {fr:.3f}  named {mean:.3f}  >=0.80 {reached}  {per}")


if __name__ == "__main__":
    main()
