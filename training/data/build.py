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
from training.data.rows import TrainingRows
from training.data.split import split_queries
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
    val_complement: bool = False  # hold out what the seed's split trains on (the other fold)
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
    train_q, val_q = split_queries(_known(queries, by_id, domains), cfg.val_fraction, seed=cfg.seed, complement=cfg.val_complement)
    synthetic = _synthetic(corpus, generators, cfg, progress=progress)
    sampler = HardNegativeSampler(corpus)
    oos_train, oos_val = split_queries(
        [LabelledQuery(q.qid, q.query, [], [], q.answer, "oos") for q in out_of_scope],
        cfg.val_fraction,
        seed=cfg.seed,
        complement=cfg.val_complement,
    )
    rows = TrainingRows(sampler, cfg.negatives, seed=cfg.seed)
    rows.add_questions(train_q, synthetic, cross_examples=cfg.cross_examples)
    rows.add_router_only(_router_synthetic(corpus, cfg, {s.doc_id for s in synthetic}), oos_train)
    relevance: list[RelevanceLabel] = []
    if judge is not None and cfg.label_relevance:
        relevance = rows.label_relevance(judge, by_id, cfg.label_limit, progress=progress)
    pool = _val_pool(val_q, sampler, by_id, cfg)

    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sources": list(sources),
        "domains": domains,
        "corpus_passages": len(by_id),
        "config": asdict(cfg),
        "generators": [g.name for g in generators],
        "judge": judge.name if judge is not None and cfg.label_relevance else None,
        "val_qids": [q.qid for q in val_q],
    }
    files = _Files(rows, synthetic, relevance, train_q, val_q, oos_val, pool, by_id)
    fp, counts = _write_atomically(out, files, manifest)
    return DataReport(out=out, fingerprint=fp, counts=counts, seconds=time.perf_counter() - t0)


def _known(queries: Sequence[LabelledQuery], by_id: dict[str, Passage], domains: list[str]) -> list[LabelledQuery]:
    """Labelled questions with the gold passages that exist; questions of unknown domains are dropped."""
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
    return kept


def _synthetic(corpus: Sequence[Passage], generators: Sequence[QueryGenerator], cfg: DataConfig, *, progress: bool) -> list[SyntheticQuery]:
    """Synthetic queries of each generator over a seeded sample of every domain's passages."""
    sample = sample_passages(corpus, cfg.synthetic_per_domain, seed=cfg.seed, min_words=cfg.min_passage_words)
    synthetic: list[SyntheticQuery] = []
    for gen in generators:
        # An LLM writes one query per passage for the first llm_per_domain sampled passages of each domain
        # (a small CPU model is slow); the heuristic generator covers the whole sample.
        items = _first_per_domain(sample, cfg.llm_per_domain) if gen.name.startswith("llm") else sample
        bar = tqdm(items, desc=f"synthetic queries ({gen.name})", unit="passage", disable=not progress)
        synthetic.extend(gen.generate(bar))
    return synthetic


def _val_pool(val_q: list[LabelledQuery], sampler: HardNegativeSampler, by_id: dict[str, Passage], cfg: DataConfig) -> set[str]:
    """Validation candidate pool: every gold passage of the held-out questions, their hard negatives, random passages."""
    pool: set[str] = set()
    for q in val_q:
        pool.update(q.gold_doc_ids)
        pool.update(sampler.sample(q.gold_doc_ids, cfg.pool_negatives, seed=cfg.seed))
    rng = random.Random(f"{cfg.seed}:pool")
    rest = sorted(set(by_id) - pool)
    pool.update(rng.sample(rest, min(cfg.pool_random, len(rest))))
    return pool


@dataclass
class _Files:
    """What a training-set folder holds, before it is written."""

    rows: TrainingRows
    synthetic: list[SyntheticQuery]
    relevance: list[RelevanceLabel]
    train_q: list[LabelledQuery]
    val_q: list[LabelledQuery]
    oos_val: list[LabelledQuery]
    pool: set[str]
    by_id: dict[str, Passage]

    def write(self, folder: Path) -> dict[str, Any]:
        """Write the data files into ``folder``; returns their counts."""
        referenced = set(self.pool)
        for r in self.rows.retriever:
            referenced.update(r["positives"])
            referenced.update(r["negatives"])
        counts: dict[str, Any] = {
            "router_train": _write_jsonl(folder / "router_train.jsonl", self.rows.router),
            "retriever_train": _write_jsonl(folder / "retriever_train.jsonl", self.rows.retriever),
            "synthetic": _write_jsonl(folder / "synthetic.jsonl", (s.row() for s in self.synthetic)),
            "relevance_labels": _write_jsonl(folder / "relevance.jsonl", (r.row() for r in self.relevance)),
            "val": _write_jsonl(folder / "val.jsonl", (_query_row(q) for q in self.val_q)),
            "val_oos": _write_jsonl(folder / "val_oos.jsonl", (_query_row(q) for q in self.oos_val)),
            "passages": _write_jsonl(folder / "passages.jsonl", (self.by_id[d].payload() for d in sorted(referenced))),
        }
        (folder / "val_pool.json").write_text(json.dumps(sorted(self.pool)), encoding="utf-8")
        counts["val_pool"] = len(self.pool)
        counts["labelled_train"] = sum(1 for q in self.train_q if not q.is_cross)
        counts["labelled_val"] = sum(1 for q in self.val_q if not q.is_cross)
        counts["cross_train"] = sum(1 for q in self.train_q if q.is_cross)
        counts["cross_val"] = sum(1 for q in self.val_q if q.is_cross)
        counts["by_origin"] = dict(Counter(r["origin"] for r in self.rows.router))
        counts["by_generator"] = dict(Counter(s.generator for s in self.synthetic))
        counts["by_domain"] = dict(Counter(d for r in self.rows.router for d in r["domains"]))
        return counts


def _write_atomically(out: Path, files: _Files, manifest: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Write the folder beside ``out``, then its manifest (with the files' fingerprint and counts), then move it
    into place; a failed write leaves no folder behind. Returns (fingerprint, counts)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        counts = files.write(tmp)
        fp = fingerprint(tmp)
        manifest = {"fingerprint": fp, **manifest, "counts": counts}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return fp, counts
