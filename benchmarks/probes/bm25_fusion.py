"""Probe: does lexical evidence (BM25) put the gold passage first where the bi-encoder's U does not?

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/bm25_fusion.py --data $FEDQA_HOME/training-data \
        --docs ../shared/data/faq6/docs.jsonl [--depth 30] [--out probe.json]

The validation single questions' served rankings (the default strategy, not reranked, top ``depth``) are re-ordered
by ``U + w * b``, where ``b`` is each candidate's BM25 score (bm25s, Lucene variant, over title + text of the whole
corpus) divided by the question's best BM25 score over the corpus. Prints Acc@1 of U alone, of BM25 alone (whole
corpus), of the candidates re-ordered by BM25 alone, and of the combination at every weight of the grid, with the
weight chosen on k-1 folds and scored on the k-th (every question scored once by a weight not fitted on it).
Needs ``pip install bm25s`` (a probe's dependency, not the service's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.guard import assigned_folds, permuted_folds  # noqa: E402
from training.reranker_data import with_candidates  # noqa: E402

WEIGHTS = [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]


def _tokenizer(stem: bool):  # noqa: ANN202 - bm25s types
    import bm25s

    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")

    def tokenize(texts: list[str], ids: bool):  # noqa: ANN202
        return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=ids, show_progress=False)

    return tokenize


def _acc(cands, bm, weight: float) -> np.ndarray:  # noqa: ANN001
    out = np.zeros(len(cands), dtype=bool)
    for i, (c, b) in enumerate(zip(cands, bm, strict=True)):
        if c.texts:
            out[i] = c.gold[int(np.argmax(np.asarray(c.unified) + weight * b))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--docs", required=True, help="the corpus (docs.jsonl) the home's index was built from")
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--stem", action="store_true", help="Snowball English stemming (pip install PyStemmer)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    docs = [json.loads(line) for line in Path(args.docs).read_text().splitlines() if line.strip()]
    index_of = {d["doc_id"]: i for i, d in enumerate(docs)}
    import bm25s

    tokenize = _tokenizer(args.stem)
    retriever = bm25s.BM25(method="lucene")
    retriever.index(tokenize([f"{d.get('title', '')}\n{d['text']}" for d in docs], True), show_progress=False)
    qs = [q for q in TrainingData.load(args.data).val if q.gold_doc_ids and not q.is_cross]
    pipeline = load_pipeline(get_settings(), with_llm=False)
    try:
        cands = with_candidates(pipeline, qs, ["labelled"] * len(qs), depth=args.depth, passages=None)
    finally:
        pipeline.close()
    bm, bm_top1 = [], []
    for q, c in zip(qs, cands, strict=True):
        scores = np.asarray(retriever.get_scores(tokenize([q.query], False)[0]))
        best = float(scores.max()) if scores.size and scores.max() > 0 else 1.0
        bm.append(np.asarray([scores[index_of[d]] / best if d in index_of else 0.0 for d in c.doc_ids]))
        bm_top1.append(docs[int(np.argmax(scores))]["doc_id"] in set(q.gold_doc_ids) if scores.size else False)
    out: dict = {
        "questions": len(cands),
        "gold_in_candidates": float(np.mean([any(c.gold) for c in cands])),
        "u_alone": float(_acc(cands, bm, 0.0).mean()),
        "bm25_alone_corpus": float(np.mean(bm_top1)),
        "bm25_alone_candidates": float(np.mean([c.gold[int(np.argmax(b))] for c, b in zip(cands, bm, strict=True) if c.texts])),
        "acc1_by_weight": {str(w): round(float(_acc(cands, bm, w).mean()), 3) for w in WEIGHTS},
    }
    per_weight = np.stack([_acc(cands, bm, w) for w in WEIGHTS])  # weights x questions
    held = np.zeros(len(cands), dtype=bool)
    chosen = []
    for train, test in assigned_folds(permuted_folds(len(cands), args.folds, np.random.default_rng(0))):
        w = int(np.argmax(per_weight[:, train].mean(axis=1)))
        chosen.append(WEIGHTS[w])
        held[test] = per_weight[w, test]
    out["crossfit"] = {"acc1": float(held.mean()), "weights": chosen}
    by_id = {d["doc_id"]: d for d in docs}
    missed = [(q, c) for q, c in zip(qs, cands, strict=True) if not (c.gold and c.gold[0])]
    section = {q.qid: {by_id[g]["title"] for g in q.gold_doc_ids if g in by_id} for q, _ in missed}
    out["u_misses"] = {  # where U's first passage is not gold: how far the gold one is, and whether they share a section
        "questions": len(missed),
        "gold_second": sum(1 for _, c in missed if len(c.gold) > 1 and c.gold[1]),
        "gold_not_in_candidates": sum(1 for _, c in missed if not any(c.gold)),
        "same_page_section": sum(1 for q, c in missed if c.doc_ids and by_id[c.doc_ids[0]]["title"] in section[q.qid]),
    }
    out["per_question"] = {"u": per_weight[0].astype(int).tolist(), "held": held.astype(int).tolist()}
    text = json.dumps(out)
    if args.out:
        args.out.write_text(text)
    print(json.dumps({k: v for k, v in out.items() if k != "per_question"}, indent=1))


if __name__ == "__main__":
    main()
