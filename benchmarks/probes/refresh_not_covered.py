"""Probe: the "not covered" stage of a home's last ``fedqa refresh --corpus`` fitted again, stored nowhere.

    FEDQA_HOME=W/fold0/home python benchmarks/probes/refresh_not_covered.py

Reads the training set the refresh built (``<home>/refresh/data-*``), splits it for the router as the refresh did
(:func:`training.bundle_fit.router_sets_from_data`, seed 0), and runs :func:`training.abstention.fit_not_covered` on
the active versions with ``save=False``: the verdict (fitted model or default, with both cross-fitted balanced
accuracies on the router's held-out questions) and the k-fold figures of the model that would serve. For comparing
two checkouts' decisions on the same refreshed home (``benchmarks/refresh_folds.py`` makes such homes) without
writing into it; ``--save`` stores it (in a copy of the home, to measure what it serves).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import Settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from training.abstention import fit_not_covered  # noqa: E402
from training.bundle_fit import NotCoveredQuestions, last_refresh_questions  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="the refresh's seed (--refresh-seed of refresh_folds.py)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--save", action="store_true", help="store the model that would serve in the home (a copy of it: it replaces the refresh's)")
    args = ap.parse_args(argv)
    settings = Settings()
    try:
        questions = last_refresh_questions(settings, seed=args.seed)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    sets = NotCoveredQuestions.of(questions.val, questions.known)
    in_scope, own = sets.in_scope, sets.out_of_scope
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        report = fit_not_covered(settings, in_scope, own, known=sets.known, pipeline=pipeline, save=args.save)
    finally:
        pipeline.close()
    fit = report.model.fit if report.model else {}
    out = {"in_scope": len(in_scope), "out_of_scope": len(own), **report.summary(), "on_fit_questions": fit.get("on_fit_questions")}
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
