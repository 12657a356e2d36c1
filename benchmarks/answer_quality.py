"""Answer quality of the extractive methods and the "not covered" decision on labelled questions.

One process, one retrieval per question (default strategy unless --strategy, deterministic gate, top 5),
then for every question the answers of four extractive methods scored against the reference answers (token
F1 with SQuAD normalisation, ROUGE-L, BLEU): ``default`` (the configured answering path: ``meaning`` with the
fitted answer policy of the home, ``answer.json``), ``meaning_unfitted`` (the span around the best sentence of
the top 3 passages, FEDQA_EXTRACTIVE_MARGIN/MAX_WORDS, what answers when no policy is fitted), ``terms`` (the
earlier answer, sentences sharing words) and ``passage`` (the top passage verbatim); the same scores after
the home's fitted abstention (a refused in-scope question scores 0); the answering path's latency after
retrieval with the sentence-vector cache emptied before every question (cold); the share of in-scope
questions refused and of out-of-scope ones answered ``not_covered`` by the home's fitted model; and
(--folds) the k-fold figures of an abstention model fitted on these questions' evidence.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/answer_quality.py --queries /tmp/route-data/val.jsonl \\
        --out-of-scope /tmp/route-data/val_oos.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time

import numpy as np

METHODS = ("default", "meaning_unfitted", "terms", "passage")


def _texts(pipeline, q, ret, p) -> dict[str, str | None]:  # noqa: ANN001
    from service.generation.extractive import ExtractConfig, by_meaning, by_terms, top_passage

    extractor = pipeline.answerer.extractor
    s = pipeline.settings
    unfitted = ExtractConfig(max_sources=s.extractive_sources, max_words=s.extractive_max_words, margin=s.extractive_margin)
    return {
        "default": extractor.extract(ret.parts, ret.hits).text,
        "meaning_unfitted": by_meaning(p.vector, ret.hits, extractor.vectors, unfitted).text,
        "terms": by_terms(q.query, ret.hits).text,
        "passage": top_passage(ret.hits).text,
    }


def _score(text: str | None, reference: str) -> dict[str, float]:
    from service.evaluation.answers import rouge_l
    from service.evaluation.wixqa import bleu, token_f1

    text = re.sub(r"\s*\[\d{1,2}\]", " ", text) if text else text  # citations are not answer words
    if not text:
        return {"f1": 0.0, "rouge_l": 0.0, "bleu": 0.0}
    return {"f1": token_f1(text, reference), "rouge_l": rouge_l(text, reference), "bleu": bleu(text, reference)}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(float(np.mean([r[k] for r in rows])), 4) for k in rows[0]} if rows else {}


def main(argv: list[str] | None = None) -> int:
    from service.config import Settings
    from service.generation.abstention import FEATURES
    from service.loading import load_pipeline
    from service.queries import load_queries
    from service.retrieval.strategies import DEFAULT_STRATEGY
    from training.abstention import choose_features

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", nargs="+", required=True, help="in-scope labelled questions (with reference answers)")
    ap.add_argument("--out-of-scope", help="questions the documentation does not answer (oos_dev.jsonl)")
    ap.add_argument("--strategy", default=DEFAULT_STRATEGY.value)
    ap.add_argument("--false-refusal", type=float, default=0.03, help="target false-refusal rate of the k-fold fit")
    ap.add_argument("--folds", type=int, default=5, help="k-fold abstention figures on these questions (0: none)")
    ap.add_argument("--limit", type=int, default=0, help="at most N questions of each side, spread evenly over the file")
    args = ap.parse_args(argv)

    inq = [q for f in args.queries for q in load_queries(f) if q.answer]
    outq = load_queries(args.out_of_scope) if args.out_of_scope else []
    if args.limit:
        inq, outq = inq[:: max(1, -(-len(inq) // args.limit))], outq[:: max(1, -(-len(outq) // args.limit))]
    pipeline = load_pipeline(Settings(sentence_vectors_precompute=0), with_llm=False)
    scores: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    after: list[dict[str, float]] = []
    ev: dict[str, list[list[float]]] = {"in": [], "out": []}
    refused: dict[str, list[float]] = {"in": [], "out": []}
    ms: list[float] = []
    vectors = pipeline.answerer.extractor.vectors
    try:
        for group, queries in (("in", inq), ("out", outq)):
            prepared = pipeline.prepare_many([q.query for q in queries])
            for q, p in zip(queries, prepared, strict=True):
                ret = pipeline.retrieve(q.query, top_k=5, gate_mode="deterministic", strategy=args.strategy, prepared=p)
                if vectors is not None:
                    vectors.clear()
                t0 = time.perf_counter()
                answer = pipeline.answer_retrieval(ret)  # the served path, cold
                ms.append((time.perf_counter() - t0) * 1000)
                refused[group].append(float(answer.mode.value == "not_covered"))
                e, _ = pipeline.answerer.evidence(ret.parts, ret.hits, ret.routing.probabilities, score_sentences=True)
                ev[group].append(e.vector(FEATURES))
                if group == "out":
                    continue
                for m, text in _texts(pipeline, q, ret, p).items():
                    scores[m].append(_score(text, q.answer or ""))
                after.append(_score(answer.text if answer.mode.value != "not_covered" else None, q.answer or ""))
        versions = pipeline.versions
        policy = pipeline.answerer.extractor.policy
        abstention = pipeline.abstention
    finally:
        pipeline.close()
    out: dict = {
        "in_scope": len(inq),
        "out_of_scope": len(outq),
        "strategy": args.strategy,
        "versions": versions,
        "answer_policy": policy.to_json() if policy else None,
        "extractive": {m: _mean(s) for m, s in scores.items()},
        "default_after_abstention": _mean(after),
        "answer_ms_cold": {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)},
        "home_abstention": {
            "model": abstention.name if abstention else None,
            "false_refusal_rate": round(float(np.mean(refused["in"])), 4) if inq else None,
            "abstention_rate": round(float(np.mean(refused["out"])), 4) if outq else None,
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    if outq and args.folds:
        cv = choose_features(np.asarray(ev["in"]), np.asarray(ev["out"]), false_refusal=args.false_refusal, folds=args.folds)
        out["abstention_kfold"] = {"target_false_refusal": args.false_refusal, **{k: v for k, v in cv.items() if k != "per_fold"}}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
