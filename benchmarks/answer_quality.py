"""Answer quality of the extractive methods and the "not covered" decision on labelled questions.

One process, one retrieval per question (mkpqa, deterministic gate, top 5), then for every question the
answers of the three extractive methods (``meaning``: the span closest in meaning, the default; ``terms``:
the earlier answer, sentences sharing words; ``passage``: the top passage verbatim), scored against the
reference answers (token F1 with SQuAD normalisation, ROUGE-L, BLEU); the latency of the ``meaning`` answer
(sentence vectors not cached: every question embeds its top passages' sentences); and the abstention
decision fitted and measured by k-fold on in-scope and out-of-scope questions (each fold's figures come from a
model fitted on the other folds), with the lexical scores after abstention (a refused in-scope question scores 0).
``fedqa evaluate --metrics answers`` reports the same metrics for the configured answering path.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/answer_quality.py --queries ../shared/data/faq6/queries_dev.jsonl \\
        --out-of-scope ../shared/data/oos_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import os
import time

import numpy as np

METHODS = ("meaning", "terms", "passage")


def main(argv: list[str] | None = None) -> int:
    from service.config import Settings
    from service.evaluation.answers import rouge_l
    from service.evaluation.wixqa import bleu, token_f1
    from service.generation.abstention import FEATURES
    from service.generation.extractive import by_terms, top_passage
    from service.loading import load_pipeline
    from service.queries import load_queries
    from training.abstention import cross_validate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", nargs="+", required=True, help="in-scope labelled questions (with reference answers)")
    ap.add_argument("--out-of-scope", help="questions the documentation does not answer (oos_dev.jsonl)")
    ap.add_argument("--false-refusal", type=float, default=0.03, help="target false-refusal rate of the fit")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--limit", type=int, default=0, help="at most N questions of each side, spread evenly over the file")
    args = ap.parse_args(argv)

    inq = [q for f in args.queries for q in load_queries(f) if q.answer]
    outq = load_queries(args.out_of_scope) if args.out_of_scope else []
    if args.limit:
        inq, outq = inq[:: max(1, -(-len(inq) // args.limit))], outq[:: max(1, -(-len(outq) // args.limit))]
    pipeline = load_pipeline(Settings(sentence_vectors_precompute=0), with_llm=False)
    scores = {m: {"f1": [], "rouge_l": [], "bleu": []} for m in METHODS}
    ev_in, ev_out, ms = [], [], []
    try:
        for group, queries, evidence in (("in", inq, ev_in), ("out", outq, ev_out)):
            prepared = pipeline.prepare_many([q.query for q in queries])
            for q, p in zip(queries, prepared):
                ret = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic", prepared=p)
                pipeline.answerer.extractor.vectors.clear()
                t0 = time.perf_counter()
                ev, meaning = pipeline.answerer.evidence(q.query, ret.hits, ret.routing.probabilities, query_vector=p.vector)
                ms.append((time.perf_counter() - t0) * 1000)
                evidence.append(ev.vector(FEATURES))
                if group == "out":
                    continue
                texts = {"meaning": meaning.text, "terms": by_terms(q.query, ret.hits).text, "passage": top_passage(ret.hits).text}
                for m, text in texts.items():
                    text = re.sub(r"\s*\[\d{1,2}\]", " ", text) if text else text  # citations are not answer words
                    scores[m]["f1"].append(token_f1(text or "", q.answer))
                    scores[m]["rouge_l"].append(rouge_l(text or "", q.answer) if text else 0.0)
                    scores[m]["bleu"].append(bleu(text or "", q.answer) if text else 0.0)
        versions = pipeline.versions
    finally:
        pipeline.close()
    out: dict = {
        "in_scope": len(inq), "out_of_scope": len(outq), "versions": versions,
        "extractive": {m: {k: round(float(np.mean(v)), 4) for k, v in s.items()} for m, s in scores.items()},
        "meaning_answer_ms": {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)},
        "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
    }
    if outq:
        cv = cross_validate(np.asarray(ev_in), np.asarray(ev_out), false_refusal=args.false_refusal, folds=args.folds)
        out["abstention"] = {"target_false_refusal": args.false_refusal, **{k: v for k, v in cv.items() if k != "per_fold"}}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
