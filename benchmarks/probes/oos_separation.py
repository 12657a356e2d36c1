"""Probe: can the served "not covered" evidence separate each neighbouring product's questions from in-scope ones at all?

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/oos_separation.py --in-scope $DATA/val.jsonl \
        --named ../shared/data/oos_family_dev_named.jsonl --corpus ../shared/data/faq6/docs.jsonl \
        --names 'sed=\\bsed\\b' 'src=\\bsrc\\b' 'berkeleydb=berkeley ?db' ...

Every question goes through the serving path once (training/abstention.py's ``collect_evidence``: default strategy,
deterministic gate, the page prior without an in-scope question's own answer). Per ``product`` of the named file:
how well each evidence feature alone separates the in-scope questions from that product's (the AUC either way
round: 0.5 none, 1.0 complete), and the share of the product's questions refused at ``--refusal`` in-scope refusal
by the served decision's model (all features) fitted **in sample** on the in-scope questions and that product's own:
a ceiling that no decision fitted without the product (leave-one-product-out, ``benchmarks/not_covered.py``) can
beat on these features. ``--names P=REGEX``: how many
corpus passages (title and text, lower-cased) match the product's name. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.generation.abstention import FEATURES  # noqa: E402
from service.jsonl import read_objects  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.queries import load_queries  # noqa: E402
from training.abstention import collect_evidence, confidences, fit  # noqa: E402


def separation(pos: np.ndarray, neg: np.ndarray) -> float:
    """The AUC between ``pos`` and ``neg`` whichever side is larger (a feature may be smaller or larger in scope)."""
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))
    return max(auc, 1.0 - auc)


def in_sample_refused(ins: np.ndarray, oos: np.ndarray, refusal: float) -> float:
    """Share of ``oos`` refused by the served decision's model (training/abstention.py's ``fit``) fitted on both,
    its threshold at the ``refusal`` quantile of the in-scope rows' confidence."""
    model = fit(ins, oos, false_refusal=refusal)
    return float(np.mean(confidences(model, oos) < model.threshold))


def name_counts(corpus: Path, names: list[str]) -> dict[str, int]:
    """Passages of ``corpus`` whose lower-cased title and text match each ``P=REGEX``."""
    patterns = {p: re.compile(rx) for p, _, rx in (n.partition("=") for n in names)}
    counts = dict.fromkeys(patterns, 0)
    for _, rec in read_objects(corpus):
        text = f"{rec.get('title', '')} {rec.get('text', '')}".lower()
        for p, rx in patterns.items():
            counts[p] += bool(rx.search(text))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-scope", nargs="+", required=True, help="labelled in-scope questions (with gold_doc_ids)")
    ap.add_argument("--named", required=True, help="out-of-scope questions with a 'product' field")
    ap.add_argument("--refusal", type=float, default=0.05, help="in-scope refusal of the in-sample threshold")
    ap.add_argument("--corpus", type=Path, help="docs.jsonl, for --names")
    ap.add_argument("--names", nargs="*", default=[], help="PRODUCT=REGEX: passages naming each product")
    args = ap.parse_args()
    ins_q = [q for f in args.in_scope for q in load_queries(f) if q.domains]
    named = [rec for _, rec in read_objects(Path(args.named))]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    ins = collect_evidence(pipeline, [q.query for q in ins_q], gold=[q.gold_doc_ids for q in ins_q])
    oos = collect_evidence(pipeline, [r["query"] for r in named])
    counts = name_counts(args.corpus, args.names) if args.corpus and args.names else {}
    out: dict = {"versions": pipeline.versions, "in_scope": len(ins_q), "refusal": args.refusal, "products": {}}
    for product in sorted({str(r["product"]) for r in named}):
        rows = oos[[i for i, r in enumerate(named) if str(r["product"]) == product]]
        varied = [j for j in range(len(FEATURES)) if np.ptp(np.r_[ins[:, j], rows[:, j]]) > 0]  # a constant one says nothing
        out["products"][product] = {
            "questions": len(rows),
            "separation": {FEATURES[j]: round(separation(ins[:, j], rows[:, j]), 3) for j in varied},
            "refused_in_sample": round(in_sample_refused(ins, rows, args.refusal), 3),
            **({"passages_naming": counts[product]} if product in counts else {}),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
