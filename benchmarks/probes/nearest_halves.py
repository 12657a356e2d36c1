"""Probe: whether ``nearest_out``'s two halves (the highest cosine to a known out-of-scope question, and to a known
in-scope one) would weigh alike if the "not covered" fit read them as two features.

    FEDQA_HOME=W/fold0/home python benchmarks/probes/nearest_halves.py [--false-refusal 0.03]

Reads the home's last refresh as ``benchmarks/probes/refresh_not_covered.py`` does (the router's held-out in-scope
questions, the given out-of-scope ones, the shipped general ones; the router's training questions as known in-scope
ones), computes each fitting question's two halves against the others (its own text left out, as
:func:`service.generation.asked.leave_one_out` does), and fits the logistic model three ways on the standardised
evidence: with ``nearest_out`` (their difference), with the two halves, and with neither. Prints each fit's
coefficients and its 5x5-fold out-of-fold shares refused at the target (threshold: the in-scope quantile of the
training part's own confidences, as :func:`training.abstention.fit` places it). Writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import Settings  # noqa: E402
from service.generation.abstention import FEATURES  # noqa: E402
from service.generation.asked import _best_other  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from training.abstention import NEAREST_OUT, QuestionEvidence, question_evidence  # noqa: E402
from training.bundle_fit import NotCoveredQuestions, last_refresh_questions  # noqa: E402
from training.data.general import general_negatives  # noqa: E402

NAMES = [*FEATURES, "out_cos", "in_cos"]


def _halves(e: QuestionEvidence, inside: np.ndarray, in_texts: list[str], outside: np.ndarray, out_texts: list[str]) -> np.ndarray:
    """``e``'s rows with the two halves appended (its whole-message vectors: single questions here)."""
    out_cos = _best_other(e.vectors, e.texts, outside, out_texts)
    in_cos = _best_other(e.vectors, e.texts, inside, in_texts)
    rows = np.c_[e.rows, out_cos, in_cos]
    rows[:, NEAREST_OUT] = out_cos - in_cos
    return rows


def _out_of_fold(x: np.ndarray, y: np.ndarray, false_refusal: float) -> tuple[float, float]:
    refused: list[bool] = []
    caught: list[bool] = []
    for rep in range(5):
        for train, test in StratifiedKFold(5, shuffle=True, random_state=rep).split(x, y):
            model = LogisticRegression(class_weight="balanced", max_iter=2000).fit(x[train], y[train])
            own = model.predict_proba(x[train])[:, 1]
            threshold = np.quantile(own[y[train] == 1], false_refusal)
            conf = model.predict_proba(x[test])[:, 1]
            refused += list(conf[y[test] == 1] < threshold)
            caught += list(conf[y[test] == 0] < threshold)
    return float(np.mean(refused)), float(np.mean(caught))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--false-refusal", type=float, default=0.03)
    args = ap.parse_args(argv)
    settings = Settings()
    try:
        questions = last_refresh_questions(settings, seed=0)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    sets = NotCoveredQuestions.of(questions.val, questions.known)
    ins, own, known = sets.in_scope, sets.out_of_scope, sets.known
    groups = (ins, own, general_negatives(), known)
    gold = ([q.gold_doc_ids for q in ins], None, None, [q.gold_doc_ids for q in known])
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        ev = [question_evidence(pipeline, [q.query for q in g], gold=g_gold) for g, g_gold in zip(groups, gold, strict=True)]
    finally:
        pipeline.close()
    inside, in_texts = np.vstack([ev[0].vectors, ev[3].vectors]), ev[0].texts + ev[3].texts
    outside, out_texts = np.vstack([ev[1].vectors, ev[2].vectors]), ev[1].texts + ev[2].texts
    x_in = _halves(ev[0], inside, in_texts, outside, out_texts)
    x_out = np.vstack([_halves(e, inside, in_texts, outside, out_texts) for e in ev[1:3]])
    x, y = np.vstack([x_in, x_out]), np.r_[np.ones(len(x_in)), np.zeros(len(x_out))]
    base = [f for f in FEATURES if f not in ("rerank_best", "nearest_out") and np.ptp(x[:, NAMES.index(f)]) > 0]
    print(f"in-scope {len(x_in)}, out-of-scope {len(x_out)}, target {args.false_refusal}")
    for label, features in (("difference", [*base, "nearest_out"]), ("halves", [*base, "out_cos", "in_cos"]), ("neither", base)):
        z = x[:, [NAMES.index(f) for f in features]]
        z = (z - z.mean(0)) / (z.std(0) + 1e-12)
        coef = LogisticRegression(class_weight="balanced", max_iter=2000).fit(z, y).coef_[0]
        refused, caught = _out_of_fold(z, y, args.false_refusal)
        print(f"{label:10s} coefficients {dict(zip(features, np.round(coef, 2).tolist(), strict=True))}")
        print(f"{'':10s} out of fold: in-scope refused {refused:.3f}, out-of-scope refused {caught:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
