"""Probe: the "not covered" fit ``fedqa ingest`` makes (heading questions against the shipped general questions), with
and without the features that read the index's vocabulary, scored on users' questions.

    python benchmarks/probes/untrained_not_covered.py --data ../shared/data/manuals_dev --home ~/fedqa-manuals

``--home``: a home ingested from ``DATA/docs`` (``benchmarks/manuals.py`` makes one). For each feature set the model is
fitted as :func:`training.abstention.fit_untrained` fits it (the heading questions of the active index, the general
questions, the in-scope refusal target ``HEADING_FALSE_REFUSAL``) and prints its k-fold figures on the heading
questions, then the share of ``questions.jsonl`` (users' in-scope questions) it refuses and the shares of
``oos.jsonl``'s off-topic and neighbouring-product questions it answers "not covered". Heading questions are made of
the index's own words, so the vocabulary features (``rare_word``, ``uncovered``) never see an unknown word on the
in-scope side: the probe measures what that costs users' questions and what those features catch.
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
from training.abstention import (  # noqa: E402
    FEATURES,
    HEADING_FALSE_REFUSAL,
    SOURCED,
    choose_features,
    collect_evidence,
    cross_validate,
    fit,
    heading_questions,
    measure,
)
from training.data.general import general_negatives  # noqa: E402

VOCABULARY = ("rare_word", "uncovered")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the manuals_dev folder (questions.jsonl, oos.jsonl)")
    ap.add_argument("--home", type=Path, required=True, help="a home ingested from DATA/docs")
    args = ap.parse_args()
    users = [json.loads(line)["query"] for line in (args.data / "questions.jsonl").read_text().splitlines() if line.strip()]
    oos = [json.loads(line) for line in (args.data / "oos.jsonl").read_text().splitlines() if line.strip()]
    off = [o["query"] for o in oos if o["product"] == "offtopic"]
    near = [o["query"] for o in oos if o["product"] != "offtopic"]
    pipeline = load_pipeline(Settings(home=args.home), with_llm=False)
    try:
        ev_in = collect_evidence(pipeline, [q.query for q in heading_questions(pipeline)])
        ev_out = collect_evidence(pipeline, [q.query for q in general_negatives()])
        ev_users, ev_off, ev_near = (collect_evidence(pipeline, qs) for qs in (users, off, near))
    finally:
        pipeline.close()
    rows = np.vstack([ev_in, ev_out])
    every = [f for i, f in enumerate(FEATURES) if f not in SOURCED or float(np.ptp(rows[:, i])) > 0]
    chosen = choose_features(ev_in, ev_out, false_refusal=HEADING_FALSE_REFUSAL)["features"]
    variants = {"as fitted": list(chosen), "without rare_word": [f for f in every if f != "rare_word"]}
    variants["without both vocabulary features"] = [f for f in every if f not in VOCABULARY]
    for name, features in variants.items():
        heldout = cross_validate(ev_in, ev_out, false_refusal=HEADING_FALSE_REFUSAL, features=tuple(features))
        model = fit(ev_in, ev_out, false_refusal=HEADING_FALSE_REFUSAL, features=features)
        on_off, on_near = measure(model, ev_users, ev_off), measure(model, ev_users, ev_near)
        print(
            f"{name}: {', '.join(features)}\n"
            f"  heading questions (k-fold): refused {heldout['false_refusal_rate']:.3f}, general not covered {heldout['abstention_rate']:.3f}\n"
            f"  users' in-scope refused {on_off['false_refusal_rate']:.3f} of {len(users)}; not covered: off-topic "
            f"{on_off['abstention_rate']:.3f} of {len(off)}, neighbouring products {on_near['abstention_rate']:.3f} of {len(near)}"
        )


if __name__ == "__main__":
    main()
