"""Probe: Acc@1 with and without the lexical index, on questions labelled with gold passages (faq6's format).

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/probes/lexical_gold.py --queries held_out.jsonl [--weights 0.25 1] [--untrained]

Every single-product question of ``--queries`` (``gold_doc_ids``) is asked in-process on the home's active versions
with the default strategy, deterministic gate and no reranking (``--untrained``: ranked as before a router is
trained; else with ``FEDQA_LEXICAL=always``, fused even beside a fitted ranking), without the home's lexical index
and with its ranking fused at each ``--weights`` (reciprocal rank fusion, :class:`service.retrieval.lexical.
RankFusion`; 1 is the unfitted default). Prints Acc@1 and Recall@5 per setting. Score it on questions the home's
router was not trained on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.artifacts import Registry  # noqa: E402
from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.queries import load_queries  # noqa: E402
from service.retrieval.lexical import LexicalIndex, RankFusion  # noqa: E402
from service.routing.router import UniformRouter  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--weights", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    ap.add_argument("--untrained", action="store_true", help="rank as a home without a trained router does (uniform p, no page prior)")
    args = ap.parse_args(argv)
    questions = [q for q in load_queries(args.queries) if len(q.domains) == 1 and q.gold_doc_ids]
    pipeline = load_pipeline(get_settings().model_copy(update={"lexical": "always"}), with_llm=False)
    registry = Registry(get_settings().home_dir)
    lexical = LexicalIndex.load(registry.path("index", pipeline.store.version))  # served or not, as the home holds it
    if args.untrained:
        pipeline.router = UniformRouter(pipeline.domains)
    rows: dict[str, list[tuple[bool, bool]]] = {}
    try:
        preps = pipeline.prepare_many([q.query for q in questions])
        for name, weight in [("lexical off", None), *[(f"lexical x{w}", w) for w in args.weights]]:
            pipeline.lexical = lexical if weight is not None else None
            if lexical is not None:
                lexical.fusion = RankFusion(lexical_weight=weight or 1.0)
            got = []
            for q, prep in zip(questions, preps, strict=True):
                ids = [h.passage.doc_id for h in pipeline.retrieve(q.query, top_k=5, prepared=prep, gate_mode="deterministic", rerank=False).hits]
                got.append((bool(ids) and ids[0] in q.gold_doc_ids, any(i in q.gold_doc_ids for i in ids)))
            rows[name] = got
    finally:
        pipeline.lexical = lexical
        pipeline.close()
    print(f"{len(questions)} single-product questions of {args.queries.name}; home index {pipeline.store.version}")
    for name, got in rows.items():
        a = np.array(got, dtype=float)
        print(f"{name:<14} Acc@1 {a[:, 0].mean():.3f}  R@5 {a[:, 1].mean():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
