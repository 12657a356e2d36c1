"""Probe: what the default ranking puts first where it misses, with the page prior and its known answers.

    FEDQA_HOME=~/fedqa-faq6-b python benchmarks/probes/known_answer_misses.py --data $FEDQA_HOME/training-data

Each validation single question with gold passages is ranked as /ask ranks it (default strategy, not reranked, top
10), with its own count left out of the page prior (``training.page_prior.unseen``). Prints the misses' count by kind:
the passage first is on the gold passage's page, of another product, or a known answer; and by the gold passage's
rank (None: not in the top 10); then one line per miss.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.retrieval.passage import point_id  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.page_prior import unseen  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    data = TrainingData.load(args.data)
    page = {d: p.source for d, p in data.passages.items()}
    qs = [q for q in data.val if q.gold_doc_ids and not q.is_cross]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    misses: list[dict[str, object]] = []
    try:
        for q in qs:
            with unseen(pipeline, q.gold_doc_ids):
                hits = pipeline.retrieve(q.query, top_k=10, strategy="fused", rerank=False).hits
                prior = pipeline.router.fitted.page_prior
                known = set(prior.known) if prior is not None else set()
            ids = [h.passage.doc_id for h in hits]
            if ids and ids[0] in q.gold_doc_ids:
                continue
            first = ids[0] if ids else ""
            misses.append(
                {
                    "query": q.query,
                    "gold": q.gold_doc_ids,
                    "rank": next((i for i, d in enumerate(ids) if d in q.gold_doc_ids), None),
                    "first": first,
                    "same_page": page.get(first) == page.get(q.gold_doc_ids[0]),
                    "other_product": bool(hits) and hits[0].passage.domain not in q.domains,
                    "known_answer": point_id(first) in known,
                }
            )
    finally:
        pipeline.close()
    summary = {
        "questions": len(qs),
        "misses": len(misses),
        "first_on_gold_page": sum(bool(m["same_page"]) for m in misses),
        "first_of_another_product": sum(bool(m["other_product"]) for m in misses),
        "first_a_known_answer": sum(bool(m["known_answer"]) for m in misses),
        "gold_rank": {str(k): v for k, v in sorted(Counter(m["rank"] for m in misses).items(), key=lambda kv: (kv[0] is None, str(kv[0])))},
    }
    print(json.dumps(summary, indent=1))
    for m in misses:
        print(json.dumps(m))


if __name__ == "__main__":
    main()
