"""Probe: whether the "not covered" threshold refuses its target share of new in-scope questions, placed as
`training.abstention.fit` places it (the in-scope quantile of the fitting questions' own confidences) or at the
same quantile of their out-of-fold confidences (each fitting question scored by a model fitted without it).

    FEDQA_HOME=W/fold0/home python benchmarks/probes/oof_threshold.py [--false-refusal 0.03] [--repeats 5]

Reads the home's last refresh as ``benchmarks/probes/refresh_not_covered.py`` does (its training set, the router's
held-out questions, the given out-of-scope ones and the shipped general ones; evidence through the serving path,
``nearest_out`` left out as the fitted-vs-default comparison leaves it), then runs an outer k-fold: each outer fold's
questions are decided by a model fitted on the others with each threshold rule, and the shares of in-scope questions
refused and of out-of-scope ones refused are printed per rule. Writes nothing.
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
from training.abstention import choose_features, confidences, fit, heading_questions, not_covered_evidence, unasked  # noqa: E402
from training.bundle_fit import NotCoveredQuestions, last_refresh_questions  # noqa: E402
from training.data.general import general_negatives  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402


def _fold_ids(n_in: int, n_out: int, folds: int, rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([permuted_folds(n_in, folds, rng), permuted_folds(n_out, folds, rng)])


def oof_threshold(ev_in: np.ndarray, ev_out: np.ndarray, features: list[str], false_refusal: float, folds: int, seed: int) -> float:
    """The ``false_refusal`` quantile of the in-scope questions' out-of-fold confidences."""
    n = len(ev_in)
    conf = np.empty(n)
    for train, test in assigned_folds(_fold_ids(n, len(ev_out), folds, np.random.default_rng(seed))):
        model = fit(ev_in[train[train < n]], ev_out[train[train >= n] - n], false_refusal=false_refusal, features=features)
        held = test[test < n]
        conf[held] = confidences(model, ev_in[held])
    return float(np.quantile(conf, false_refusal, method="lower"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--false-refusal", type=float, default=0.03)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="outer k-fold repeated with these many seeds")
    args = ap.parse_args(argv)
    settings = Settings()
    try:
        questions = last_refresh_questions(settings, seed=0)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    sets = NotCoveredQuestions.of(questions.val, questions.known)
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        ev = not_covered_evidence(pipeline, sets.in_scope, sets.out_of_scope, heading_questions(pipeline), general_negatives(), sets.known)
    finally:
        pipeline.close()
    ev_in, ev_out = unasked(ev.labelled), unasked(np.vstack([ev.out_of_scope, ev.general]))
    features = choose_features(ev_in, ev_out, false_refusal=args.false_refusal, folds=args.folds)["features"]
    n = len(ev_in)
    tallies: dict[str, list[float]] = {"in-sample": [0, 0], "out-of-fold": [0, 0]}
    for seed in range(args.repeats):
        for train, test in assigned_folds(_fold_ids(n, len(ev_out), args.folds, np.random.default_rng(100 + seed))):
            tr_in, tr_out = ev_in[train[train < n]], ev_out[train[train >= n] - n]
            te_in, te_out = ev_in[test[test < n]], ev_out[test[test >= n] - n]
            model = fit(tr_in, tr_out, false_refusal=args.false_refusal, features=features)
            for rule, threshold in (
                ("in-sample", model.threshold),
                ("out-of-fold", oof_threshold(tr_in, tr_out, features, args.false_refusal, args.folds, seed)),
            ):
                tallies[rule][0] += float((confidences(model, te_in) < threshold).sum())
                tallies[rule][1] += float((confidences(model, te_out) < threshold).sum())
    out = {
        rule: {"in_scope_refused": round(t[0] / (n * args.repeats), 4), "out_of_scope_refused": round(t[1] / (len(ev_out) * args.repeats), 4)}
        for rule, t in tallies.items()
    }
    print(json.dumps({"in_scope": n, "out_of_scope": len(ev_out), "target": args.false_refusal, "features": features, **out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
