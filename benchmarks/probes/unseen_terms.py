"""Probe: how often a question holds a word that no passage of the corpus contains (a "not covered" signal).

    python benchmarks/probes/unseen_terms.py --corpus ../shared/data/faq6/docs.jsonl \
        --sets in-scope=$DATA/val.jsonl named=../shared/data/oos_family_dev_named.jsonl oos=../shared/data/oos_dev.jsonl

For each question set: the share of questions with at least one word of 3 or more characters (service/text.py's
words, lower-cased) found in at most ``--max-df`` passages (title and text), and the share per ``product``.
``--stems``: words as the service's vocabulary counts them (stop words out, English stems:
``service.retrieval.vocabulary.passage_terms``), so an inflection of a word the corpus holds is not unseen.
Prints one JSON object. No model is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.retrieval.vocabulary import passage_terms  # noqa: E402
from service.text import words  # noqa: E402


def _terms(text: str) -> set[str]:
    return {w.lower() for w in words(text) if len(w) >= 3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="docs.jsonl")
    ap.add_argument("--sets", nargs="+", required=True, help="NAME=FILE.jsonl question sets")
    ap.add_argument("--max-df", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--stems", action="store_true", help="count stems as the service's vocabulary does")
    args = ap.parse_args()
    terms = passage_terms if args.stems else _terms
    df: Counter[str] = Counter()
    for line in Path(args.corpus).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            df.update(terms(f"{rec.get('title', '')} {rec['text']}"))
    out: dict = {"corpus_terms": len(df), "sets": {}}
    for spec in args.sets:
        name, path = spec.split("=", 1)
        rows = [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
        per: dict = {}
        for k in args.max_df:
            flagged = [any(df[t] <= k for t in terms(r["query"])) for r in rows]
            by: dict[str, list[bool]] = defaultdict(list)
            for r, f in zip(rows, flagged, strict=True):
                by[str(r.get("product", "-"))].append(f)
            share = {p: round(sum(v) / len(v), 3) for p, v in sorted(by.items())}
            per[f"df<={k}"] = {"share": round(sum(flagged) / max(1, len(rows)), 3), "by_product": share}
        out["sets"][name] = {"questions": len(rows), **per}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
