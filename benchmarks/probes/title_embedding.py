"""Probe: does the bi-encoder rank better when a passage is embedded with its title (``title: text``)?

    python benchmarks/probes/title_embedding.py --docs ../shared/data/faq6/docs.jsonl \
        --queries $FEDQA_HOME/training-data/val.jsonl [--retriever $FEDQA_HOME/retrievers/<version>] [--backend onnx]

Every passage of ``--docs`` is embedded with the same encoder (the shipped MiniLM, or a trained retriever's folder) in
each form of ``--formats`` (default all three): its text alone (``text``, what `fedqa index build` stores today),
``title: text`` (``title_text``, the reranker's ``--titles`` format) and ``section: text`` (``section_text``: the
title's last `` > `` part alone, the section's own heading without the page path a page's passages share); with
``text`` and ``title_text`` both, also their two cosines summed (``text+title_text``: a passage stored with both
vectors). Each question is then scored by exact dot product over all passages (uis: one unified ranking) and over its
own domains' passages only (oracle), for each form: Acc@1, Recall@20 and MRR@20, single and cross questions apart.
Prints one JSON object. No index, router or gate: the ranking a passage's vector gives, nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.evaluation.retrieval_metrics import acc_at_top1, mrr, recall_at_k  # noqa: E402
from service.queries import load_queries  # noqa: E402
from service.reranking.params import passage_text  # noqa: E402
from service.retrieval.encoder import Encoder, packaged_minilm_path  # noqa: E402


def _scores(q_vecs: np.ndarray, p_vecs: np.ndarray, queries, doc_ids: list[str], domains: np.ndarray, *, oracle: bool) -> dict[str, float]:  # noqa: ANN001
    out: dict[str, list[float | None]] = {}
    for qv, q in zip(q_vecs, queries, strict=True):
        s = p_vecs @ qv
        if oracle:
            s = np.where(np.isin(domains, q.domains), s, -np.inf)
        top = np.argsort(-s)[:20]
        ranked = [doc_ids[i] for i in top]
        gold = set(q.gold_doc_ids)
        for k, v in (("acc_at_top1", acc_at_top1(ranked, gold)), ("recall_at_20", recall_at_k(ranked, gold, 20)), ("mrr", mrr(ranked, gold))):
            out.setdefault(k, []).append(v)
    return {k: round(float(np.mean([x for x in v if x is not None])), 4) for k, v in out.items()}


def _title(rec: dict) -> str:
    return str(rec.get("title") or "")


def _section(rec: dict) -> str:
    return _title(rec).rsplit(" > ", 1)[-1]


FORMATS = {"text": None, "title_text": _title, "section_text": _section}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--retriever", default=None, help="a trained retriever's folder (default: the shipped MiniLM)")
    ap.add_argument("--backend", default="onnx", choices=["onnx", "torch"])
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS), help="the passage forms embedded")
    args = ap.parse_args()
    recs = [json.loads(line) for line in Path(args.docs).open(encoding="utf-8")]
    doc_ids = [r["doc_id"] for r in recs]
    domains = np.array([r["domain"] for r in recs])
    path = Path(args.retriever) if args.retriever else packaged_minilm_path()
    onnx_dir = path / "onnx" if args.retriever else None
    encoder = Encoder(path, backend=args.backend, onnx_dir=onnx_dir) if onnx_dir and onnx_dir.is_dir() else Encoder(path, backend="torch")
    queries = [q for q in load_queries(args.queries) if q.gold_doc_ids]
    q_vecs = np.stack([encoder.embed_query(q.query) for q in queries])
    out: dict[str, object] = {"docs": args.docs, "queries": args.queries, "n": len(queries), "retriever": str(path), "runtime": encoder.backend.value}
    vectors: dict[str, np.ndarray] = {}
    for name in args.formats:
        head = FORMATS[name]
        t0 = time.perf_counter()
        vectors[name] = encoder.embed_passages([passage_text(head(r) if head else "", r["text"], titles=head is not None) for r in recs], bulk=True)
        out[f"{name}_embed_s"] = round(time.perf_counter() - t0, 1)
    if {"text", "title_text"} <= set(vectors):  # both cosines summed: a passage stored with both vectors
        vectors["text+title_text"] = np.hstack([vectors["text"], vectors["title_text"]])
    for name, p_vecs in vectors.items():
        both = name == "text+title_text"  # the question's vector beside itself: the sum of its two cosines
        for group, qs in (("single", [q for q in queries if not q.is_cross]), ("cross", [q for q in queries if q.is_cross])):
            if not qs:
                continue
            idx = [queries.index(q) for q in qs]
            qv = np.hstack([q_vecs[idx], q_vecs[idx]]) if both else q_vecs[idx]
            for oracle in (False, True):
                out[f"{name}_{group}_{'oracle' if oracle else 'uis'}"] = _scores(qv, p_vecs, qs, doc_ids, domains, oracle=oracle)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
