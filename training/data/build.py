"""``fedqa data build``: router and retriever training sets from a corpus and labelled queries.

Output folder (all JSON Lines unless said otherwise)::

    router_train.jsonl     {"qid", "query", "domains", "origin", "generator"?}
    retriever_train.jsonl  {"qid", "query", "domains", "positives": [doc_id], "negatives": [doc_id], "origin", "generator"?}
    synthetic.jsonl        every synthetic query with the generator that made it
    relevance.jsonl        LLM relevance labels (only with label_relevance)
    val.jsonl              held-out labelled queries (queries.jsonl format)
    val_oos.jsonl          held-out out-of-scope questions (no domain), when --out-of-scope is given
    val_pool.json          doc_ids of the validation candidate pool (every gold passage of val.jsonl included)
    passages.jsonl         every passage referenced above (docs.jsonl format)
    manifest.json          settings, counts and the fingerprint of the files above (written last)

``origin`` is ``labelled`` (an expert question), ``synthetic``, ``cross`` (a labelled cross-domain
question, or two labelled questions of different domains joined) or ``out-of-scope`` (a question no
domain answers: the router learns all p_j low; router rows only). The router also gets heuristic
questions for up to ``router_synthetic_per_domain`` passages of each domain (router rows only), so
that it learns every domain's vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from service.queries import LabelledQuery
from service.retrieval.passage import Passage
from training.data.negatives import HardNegativeSampler
from training.data.relevance import LLMRelevanceJudge, RelevanceLabel
from training.data.split import join_cross, split_queries
from training.data.synthetic import QueryGenerator, SyntheticQuery

log = logging.getLogger("fedqa.training.data")

DATA_FILES = (
    "router_train.jsonl",
    "retriever_train.jsonl",
    "synthetic.jsonl",
    "relevance.jsonl",
    "val.jsonl",
    "val_oos.jsonl",
    "val_pool.json",
    "passages.jsonl",
)
MANIFEST = "manifest.json"


@dataclass
class DataConfig:
    """How a training set is made."""

    val_fraction: float = 0.3
    seed: int = 0
    synthetic_per_domain: int = 300
    min_passage_words: int = 12
    negatives: int = 3
    cross_examples: int = 100
    pool_random: int = 2000
    pool_negatives: int = 10
    llm_per_domain: int = 50
    router_synthetic_per_domain: int = 2000
    label_relevance: bool = False
    label_limit: int = 500


@dataclass
class DataReport:
    """What a build produced."""

    out: Path
    fingerprint: str
    counts: dict = field(default_factory=dict)
    seconds: float = 0.0


def fingerprint(folder: Path) -> str:
    """sha256 over the data files of a training-set folder (names and bytes, fixed order)."""
    h = hashlib.sha256()
    for name in DATA_FILES:
        f = folder / name
        if f.is_file():
            h.update(name.encode() + b"\0")
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def _query_row(q: LabelledQuery) -> dict:
    row = {"qid": q.qid, "query": q.query, "domains": q.domains, "gold_doc_ids": q.gold_doc_ids}
    if q.answer:
        row["answer"] = q.answer
    if q.kind:
        row["kind"] = q.kind
    if q.parts:
        row["parts"] = q.parts
    return row


def sample_passages(corpus: Sequence[Passage], per_domain: int, *, seed: int, min_words: int) -> list[Passage]:
    """A seeded sample of up to ``per_domain`` passages of each domain with at least ``min_words`` words."""
    by_domain: dict[str, list[Passage]] = defaultdict(list)
    for p in corpus:
        if len(p.text.split()) >= min_words:
            by_domain[p.domain].append(p)
    out: list[Passage] = []
    for d in sorted(by_domain):
        group = sorted(by_domain[d], key=lambda p: p.doc_id)
        rng = random.Random(f"{seed}:synthetic:{d}")
        out.extend(rng.sample(group, min(per_domain, len(group))))
    return out


def _first_per_domain(passages: Sequence[Passage], n: int) -> list[Passage]:
    seen: Counter = Counter()
    out = []
    for p in passages:
        if seen[p.domain] < n:
            seen[p.domain] += 1
            out.append(p)
    return out


def _router_synthetic(corpus: Sequence[Passage], cfg: DataConfig, done: set[str]) -> list[SyntheticQuery]:
    """Heuristic questions for the router from a seeded sample of each domain's passages (not already given ones)."""
    from training.data.synthetic import HeuristicQueryGenerator

    rest = [p for p in corpus if p.doc_id not in done]
    sample = sample_passages(rest, cfg.router_synthetic_per_domain, seed=cfg.seed + 1, min_words=cfg.min_passage_words)
    return list(HeuristicQueryGenerator().generate(sample))


def build_training_data(
    corpus: Sequence[Passage],
    queries: Sequence[LabelledQuery],
    out: Path,
    *,
    generators: Sequence[QueryGenerator],
    config: DataConfig | None = None,
    judge: LLMRelevanceJudge | None = None,
    sources: Sequence[str] = (),
    overwrite: bool = False,
    progress: bool = True,
    out_of_scope: Sequence[LabelledQuery] = (),
) -> DataReport:
    """Write a training-set folder ``out`` (atomically: a failed build leaves no folder behind)."""
    t0 = time.perf_counter()
    cfg = config or DataConfig()
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (pass --force to replace it)")
    by_id = {p.doc_id: p for p in corpus}
    if not by_id:
        raise ValueError("the corpus is empty")
    domains = sorted({p.domain for p in corpus})

    # Labelled questions: keep gold passages that exist; questions of unknown domains are dropped.
    kept: list[LabelledQuery] = []
    missing_gold = 0
    for q in queries:
        golds = [g for g in q.gold_doc_ids if g in by_id]
        missing_gold += len(q.gold_doc_ids) - len(golds)
        doms = [d for d in q.domains if d in domains]
        if doms:
            kept.append(LabelledQuery(q.qid, q.query, doms, golds, q.answer, q.kind, q.parts))
    if missing_gold:
        log.warning("%d gold passages of the labelled queries are not in the corpus; ignored", missing_gold)
    train_q, val_q = split_queries(kept, cfg.val_fraction, seed=cfg.seed)

    # Synthetic queries.
    sample = sample_passages(corpus, cfg.synthetic_per_domain, seed=cfg.seed, min_words=cfg.min_passage_words)
    synthetic: list[SyntheticQuery] = []
    for gen in generators:
        # An LLM writes one query per passage for the first llm_per_domain sampled passages of each domain
        # (a small CPU model is slow); the heuristic generator covers the whole sample.
        items = _first_per_domain(sample, cfg.llm_per_domain) if gen.name.startswith("llm") else sample
        bar = tqdm(items, desc=f"synthetic queries ({gen.name})", unit="passage", disable=not progress)
        synthetic.extend(gen.generate(bar))
    relevance: list[RelevanceLabel] = []

    sampler = HardNegativeSampler(corpus)
    rows_retriever: list[dict] = []
    rows_router: list[dict] = []

    def add(qid: str, query: str, doms: list[str], golds: list[str], origin: str, generator: str | None = None) -> None:
        base = {"qid": qid, "query": query, "domains": doms, "origin": origin}
        if generator:
            base["generator"] = generator
        rows_router.append(dict(base))
        if golds:
            negs = sampler.sample(golds, cfg.negatives, seed=cfg.seed)
            rows_retriever.append({**base, "positives": list(golds), "negatives": negs})

    for q in train_q:
        add(q.qid, q.query, q.domains, q.gold_doc_ids, "cross" if q.is_cross else "labelled")
    for q in join_cross([q for q in train_q if q.gold_doc_ids], cfg.cross_examples, seed=cfg.seed):
        add(q.qid, q.query, q.domains, q.gold_doc_ids, "cross", "joined")
    for i, s in enumerate(synthetic):
        add(f"syn-{i:06d}", s.query, [s.domain], [s.doc_id], "synthetic", s.generator)
    for i, s in enumerate(_router_synthetic(corpus, cfg, {s.doc_id for s in synthetic})):
        rows_router.append({"qid": f"rsyn-{i:06d}", "query": s.query, "domains": [s.domain], "origin": "synthetic",
                            "generator": s.generator})
    oos_train, oos_val = split_queries([LabelledQuery(q.qid, q.query, [], [], q.answer, "oos") for q in out_of_scope],
                                       cfg.val_fraction, seed=cfg.seed)
    for q in oos_train:
        rows_router.append({"qid": q.qid, "query": q.query, "domains": [], "origin": "out-of-scope"})

    # Optional LLM relevance labels: drop synthetic pairs the judge rejects, and hard negatives it finds relevant.
    if judge is not None and cfg.label_relevance:
        budget = cfg.label_limit
        pairs = []
        for r in rows_retriever:
            if r["origin"] == "synthetic":
                pairs.append((r, r["positives"][0], "positive"))
            pairs.extend((r, n, "negative") for n in r["negatives"])
        rng = random.Random(f"{cfg.seed}:relevance")
        rng.shuffle(pairs)
        drop_rows: set[str] = set()
        for r, doc, role in tqdm(pairs[:budget], desc="relevance labels", unit="pair", disable=not progress):
            lab = judge.label(r["qid"], r["query"], by_id[doc])
            relevance.append(lab)
            if role == "positive" and lab.relevant is False:
                drop_rows.add(r["qid"])
            elif role == "negative" and lab.relevant is True:
                r["negatives"].remove(doc)
        if drop_rows:
            rows_retriever = [r for r in rows_retriever if r["qid"] not in drop_rows]
            rows_router = [r for r in rows_router if r["qid"] not in drop_rows]

    # Validation candidate pool: every gold passage of the held-out questions, their hard negatives, random passages.
    pool: set[str] = set()
    for q in val_q:
        pool.update(q.gold_doc_ids)
        pool.update(sampler.sample(q.gold_doc_ids, cfg.pool_negatives, seed=cfg.seed))
    rng = random.Random(f"{cfg.seed}:pool")
    rest = sorted(set(by_id) - pool)
    pool.update(rng.sample(rest, min(cfg.pool_random, len(rest))))

    referenced = set(pool)
    for r in rows_retriever:
        referenced.update(r["positives"])
        referenced.update(r["negatives"])

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        counts: dict[str, Any] = {
            "router_train": _write_jsonl(tmp / "router_train.jsonl", rows_router),
            "retriever_train": _write_jsonl(tmp / "retriever_train.jsonl", rows_retriever),
            "synthetic": _write_jsonl(tmp / "synthetic.jsonl", (s.row() for s in synthetic)),
            "relevance_labels": _write_jsonl(tmp / "relevance.jsonl", (r.row() for r in relevance)),
            "val": _write_jsonl(tmp / "val.jsonl", (_query_row(q) for q in val_q)),
            "val_oos": _write_jsonl(tmp / "val_oos.jsonl", (_query_row(q) for q in oos_val)),
            "passages": _write_jsonl(tmp / "passages.jsonl", (by_id[d].payload() for d in sorted(referenced))),
        }
        (tmp / "val_pool.json").write_text(json.dumps(sorted(pool)), encoding="utf-8")
        counts["val_pool"] = len(pool)
        counts["labelled_train"] = sum(1 for q in train_q if not q.is_cross)
        counts["labelled_val"] = sum(1 for q in val_q if not q.is_cross)
        counts["cross_train"] = sum(1 for q in train_q if q.is_cross)
        counts["cross_val"] = sum(1 for q in val_q if q.is_cross)
        counts["by_origin"] = dict(Counter(r["origin"] for r in rows_router))
        counts["by_generator"] = dict(Counter(s.generator for s in synthetic))
        counts["by_domain"] = dict(Counter(d for r in rows_router for d in r["domains"]))
        fp = fingerprint(tmp)
        manifest = {
            "fingerprint": fp,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sources": list(sources),
            "domains": domains,
            "corpus_passages": len(by_id),
            "config": asdict(cfg),
            "generators": [g.name for g in generators],
            "judge": judge.name if judge is not None and cfg.label_relevance else None,
            "val_qids": [q.qid for q in val_q],
            "counts": counts,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return DataReport(out=out, fingerprint=fp, counts=counts, seconds=time.perf_counter() - t0)
