"""Many products: faq6 split into M sub-products, ingested, routed and asked, one JSON line per M.

    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --products 6 50 200 --work /path/to/scratch

For each M (each in its own process, so that ``rss_mib`` is that M's): faq6 (``../shared/data/faq6``) is cut into M
sub-products along its own structure (:func:`split_products`): each product gets a share of M proportional to its
passages (at least one), and its passages, in page order, are cut into that many contiguous runs of similar size at
section boundaries (inside a section only when one section is larger than a run); with M below the number of
products, whole products are packed into M groups. M = 6 is faq6's own six products. Every labelled dev question
keeps its gold passages; the sub-products holding them become its domains. Then, in a fresh home under ``--work``:

- ``ingest_s``: ``fedqa ingest`` of the relabelled docs.jsonl (indexes/ingest.py) with the **shipped base MiniLM
  retriever, not fine-tuned** (no retriever training at any M). The passage vectors are taken from a cache keyed
  by text (:class:`CachedEncoder`, this benchmark's only): faq6 is encoded once (``encode_s``, ~2.5 min on 2 cores;
  0 when ``--work`` already holds the vectors) and reused at every M, so ``ingest_s`` is segmenting, writing the
  shards and activating the version, without the encoder. Router training questions (synthetic ones included)
  are embedded through the same cache (``query_encode_s``), so ``router_train_s`` is the head, its calibration,
  the fused fit, the abstention and split fits, without the encoder.
- ``router_train_s``: ``fedqa train router --queries FOLD`` (the CLI in-process; its own 20% validation split of
  the fold), once per fold, mean of the two.
- Out of sample as quality.py's ``--combine`` pools the refresh flow's two builds: the dev questions are split in
  two by :func:`training.data.split.split_queries` (fraction 0.5, and its complement; stratified by faq6 product,
  so the folds are the same at every M); the router trained on one fold scores the other, so every question is
  scored once. ``acc_at_1_*`` is quality.py's :func:`~quality.score` (Acc@Top1 of the ranking, deterministic gate,
  top 5): ``uis`` searches every product, ``default`` is the default strategy (fused), ``oracle`` searches only the
  question's gold sub-products (quality.py's ``oracle``).
- ``p50/p95_ms_*``: ``/ask`` with ``generate: false`` through :func:`service.ask.answer` on the pipeline loaded
  from the home (the encoder's query cache off, so each question is embedded as a new one), per question, uis and
  default alternately, after a warm-up of a few questions.
- ``searched_mean`` / ``searched_fraction``: products whose shard the default strategy's request actually
  searched (counted at the store, every ``search`` call of the request, by-product answers included), mean per
  question and as a share of M. fused searches every product for its evidence when its fit reads the evidence, and
  only its fitted breadth (the heaviest ``search_top`` products) when the fit is its prior family (q = p).
  ``active_mean`` / ``active_fraction``: the products whose hits enter the ranking (the
  response's ``routing.active_domains``).
- ``router_recall_at_k``: share of questions whose best-ranked gold sub-product is in the router's top k
  (calibrated p, out of sample), for k = 1, 5, 10% and 20% of M; ``router_k_for``: the k that covers 90/95/99%.
- ``rss_mib``: RSS of the benchmark process of that M after it served the questions (it also built the home and
  trained the routers: an upper bound for a service of M products).

``--max-passages`` / ``--max-questions``: a seeded slice (the questions' gold pages first, then other pages) for
a smoke run. Prints one JSON line per M with the machine and its load average.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_common import FAQ6, REPO, emit, percentile, read_jsonl, rss_bytes  # noqa: E402

sys.path.insert(0, str(REPO))
from service.retrieval.encoder import Encoder  # noqa: E402

TOP_K = 5
WARMUP = 3


# ---------------------------------------------------------------- the split


def _cuts(sizes: list[int], k: int) -> list[int]:
    """Indices into the units where k contiguous runs of similar total size start (first is 0)."""
    total = sum(sizes)
    edges = np.cumsum([0, *sizes])
    starts = [0]
    for j in range(1, k):
        i = int(np.argmin(np.abs(edges - j * total / k)))
        i = min(max(i, starts[-1] + 1), len(sizes) - (k - j))  # each run non-empty
        starts.append(i)
    return starts


def _units(docs: list[dict], target: float) -> list[list[int]]:
    """One product's passages (indices, in page order) as units: runs of one page section, a section larger than
    ``target`` passages cut into single passages."""
    runs: list[list[int]] = []
    for i, d in enumerate(docs):
        if runs and (docs[runs[-1][-1]]["source"], docs[runs[-1][-1]]["title"]) == (d["source"], d["title"]):
            runs[-1].append(i)
        else:
            runs.append([i])
    return [u for r in runs for u in ([[i] for i in r] if len(r) > target else [r])]


def _shares(sizes: dict[str, int], m: int) -> dict[str, int]:
    """M split over the products in proportion to their passages, at least one each (largest remainder)."""
    total = sum(sizes.values())
    quota = {p: max(1.0, m * n / total) for p, n in sizes.items()}
    k = {p: int(q) for p, q in quota.items()}
    for p in sorted(sizes, key=lambda p: (-(quota[p] - k[p]), p)):
        if sum(k.values()) >= m:
            break
        k[p] += 1
    while sum(k.values()) > m:  # the minimum of one pushed it over: take from the largest
        p = max(k, key=lambda p: (k[p], p))
        k[p] -= 1
    return k


def split_products(docs: list[dict], m: int) -> list[str]:
    """The sub-product of each passage (``docs`` in faq6's page order): M sub-products of similar size, deterministic."""
    by: dict[str, list[int]] = defaultdict(list)
    for i, d in enumerate(docs):
        by[d["domain"]].append(i)
    out = [""] * len(docs)
    if m < len(by):  # whole products packed into m groups, largest first into the smallest group
        groups: list[list[str]] = [[] for _ in range(m)]
        for p in sorted(by, key=lambda p: (-len(by[p]), p)):
            min(groups, key=lambda g: sum(len(by[x]) for x in g)).append(p)
        for g in groups:
            for p in g:
                for i in by[p]:
                    out[i] = "_".join(sorted(g))
        return out
    shares = _shares({p: len(ix) for p, ix in by.items()}, m)
    for p, ix in by.items():
        k = shares[p]
        units = _units([docs[i] for i in ix], len(ix) / k)
        starts = _cuts([len(u) for u in units], k)
        for j, (a, b) in enumerate(zip(starts, [*starts[1:], len(units)], strict=True)):
            for u in units[a:b]:
                for i in u:
                    out[ix[i]] = p if k == 1 else f"{p}-{j:03d}"
    return out


def load_slice(faq6: Path, max_passages: int | None, max_questions: int | None, seed: int) -> tuple[list[dict], list[dict]]:
    """faq6's passages and labelled single-product dev questions (all of faq6's; the folds hold single ones), or a
    seeded slice: ``max_questions`` questions, then the pages of their gold passages and other pages (seeded order) up
    to ``max_passages`` (gold passages always kept)."""
    docs, qs = read_jsonl(faq6 / "docs.jsonl"), [q for q in read_jsonl(faq6 / "queries_dev.jsonl") if q["gold_doc_ids"] and len(q["domains"]) == 1]
    if max_questions and len(qs) > max_questions:
        keep_q = set(random.Random(seed).sample(range(len(qs)), max_questions))
        qs = [q for i, q in enumerate(qs) if i in keep_q]
    if max_passages and len(docs) > max_passages:
        gold = {g for q in qs for g in q["gold_doc_ids"]}
        pages: dict[str, list[int]] = defaultdict(list)
        for i, d in enumerate(docs):
            pages[d["source"]].append(i)
        order = sorted(pages)
        random.Random(seed).shuffle(order)
        order.sort(key=lambda s: not any(docs[i]["doc_id"] in gold for i in pages[s]))  # gold pages first (stable)
        keep = {i for i, d in enumerate(docs) if d["doc_id"] in gold}
        for s in order:
            if len(keep) >= max_passages:
                break
            keep.update(pages[s][: max_passages - len(keep)])
        docs = [d for i, d in enumerate(docs) if i in keep]
    return docs, qs


def relabel(docs: list[dict], qs: list[dict], m: int) -> tuple[list[dict], list[dict]]:
    """Passages with their sub-product as domain, and questions whose domains are their gold passages' sub-products."""
    sub = split_products(docs, m)
    of = {d["doc_id"]: s for d, s in zip(docs, sub, strict=True)}
    out_docs = [{**d, "domain": s} for d, s in zip(docs, sub, strict=True)]
    out_qs = [{**q, "domains": sorted({of[g] for g in q["gold_doc_ids"]})} for q in qs]
    return out_docs, out_qs


# ---------------------------------------------------------------- the encoder with vectors kept by text


class CachedEncoder(Encoder):
    """The base encoder, its passage and query vectors kept by text in ``cache_dir`` (this benchmark's only: faq6 is
    encoded once and every M reuses the vectors). ``cache_queries`` False: questions go to the model (timing)."""

    def __init__(self, cache_dir: Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache_dir = cache_dir
        self.cache_queries = True
        self.seconds = {"passage": 0.0, "query": 0.0}
        self._vectors: dict[str, dict[str, np.ndarray]] = {kind: self._load(kind) for kind in ("passage", "query")}

    def _file(self, kind: str) -> Path:
        runtime = self.passage_runtime if kind == "passage" else self.query_runtime
        tag = hashlib.sha256(f"{self.version}\0{self.path}\0{runtime}".encode()).hexdigest()[:16]
        return self.cache_dir / f"{kind}-{tag}"

    def _load(self, kind: str) -> dict[str, np.ndarray]:
        f = self._file(kind)
        if not f.with_suffix(".json").is_file():
            return {}
        keys = json.loads(f.with_suffix(".json").read_text(encoding="utf-8"))
        return dict(zip(keys, np.load(f.with_suffix(".npy")), strict=True))

    def save(self) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        for kind, vecs in self._vectors.items():
            f = self._file(kind)
            np.save(f.with_suffix(".npy"), np.stack(list(vecs.values())) if vecs else np.zeros((0, self.dim), np.float32))
            f.with_suffix(".json").write_text(json.dumps(list(vecs)), encoding="utf-8")

    def _cached(self, kind: str, texts: Sequence[str], encode: Any) -> np.ndarray:
        store = self._vectors[kind]
        key = {t: hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts}
        missing = sorted({t for t in texts if key[t] not in store})
        if missing:
            t0 = time.perf_counter()
            store.update(zip((key[t] for t in missing), encode(missing), strict=True))
            self.seconds[kind] += time.perf_counter() - t0
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([store[key[t]] for t in texts]).astype(np.float32, copy=False)

    def embed_passages(self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False, bulk: bool = False) -> np.ndarray:
        return self._cached("passage", list(texts), lambda t: Encoder.embed_passages(self, t, batch_size=batch_size, progress=progress, bulk=bulk))

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        if not self.cache_queries:
            return super().embed_queries(queries)
        return self._cached("query", list(queries), lambda t: Encoder.embed_queries(self, t))


def cached_encoder(settings: Any, cache_dir: Path) -> CachedEncoder:
    """The base retriever as :func:`service.retrieval.encoder.load_encoder` makes it, with vectors kept by text."""
    from service.retrieval.encoder import base_onnx_dir, bulk_bf16, packaged_minilm_path

    path = Path(settings.encoder_model) if settings.encoder_model else packaged_minilm_path()
    backend = settings.encoder_backend
    return CachedEncoder(
        cache_dir,
        path,
        version="base",
        backend=backend,
        onnx_dir=base_onnx_dir(settings, path),
        cache_size=0,
        threads=settings.torch_threads,
        bulk_bf16=bulk_bf16(settings, backend),
    )


@contextlib.contextmanager
def encoder_patched(encoder: Encoder) -> Iterator[None]:
    """``load_encoder`` (as router training imports it) returns ``encoder``."""
    import service.retrieval.encoder as module

    saved = module.load_encoder
    module.load_encoder = lambda *a, **k: encoder
    try:
        yield
    finally:
        module.load_encoder = saved


# ---------------------------------------------------------------- one M


class CountingStore:
    """A store that records the domains searched (every ``search`` call) and passes everything else through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: set[str] = set()

    def search(self, domain: str, *args: Any, **kwargs: Any) -> Any:
        self.seen.add(domain)
        return self.inner.search(domain, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def folds(qs: list[dict]) -> list[set[str]]:
    """The two held-out folds of the dev questions: split_queries' half (by faq6 product) and its complement."""
    from service.queries import LabelledQuery
    from training.data.split import split_queries

    labelled = [LabelledQuery(q["qid"], q["query"], list(q["domains"]), list(q["gold_doc_ids"])) for q in qs]
    return [{q.qid for q in split_queries(labelled, 0.5, seed=0, complement=c)[1]} for c in (False, True)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def train_router_library(settings: Any, train: list[dict], encoder: Encoder) -> tuple[float, float]:
    """``--router-only``: the router version alone, as ``fedqa train router --queries`` makes it (its split of the
    questions, its default configuration) by :func:`training.router.train_and_activate`, without the command's
    abstention and by-product fits (smoke runs and the test); seconds, twice."""
    from service.queries import LabelledQuery
    from training.router import RouterConfig, train_and_activate
    from training.router_data import stratified_split

    questions = [LabelledQuery(q["qid"], q["query"], q["domains"], q["gold_doc_ids"]) for q in train]
    fit, val = stratified_split(questions, 0.2, seed=0)
    t0 = time.perf_counter()
    with encoder_patched(encoder):
        train_and_activate(settings, fit, val=val, config=RouterConfig(), progress=False)
    seconds = time.perf_counter() - t0
    return seconds, seconds


def train_router(home: Path, train: list[dict], encoder: Encoder) -> tuple[float, float]:
    """``fedqa train router --queries`` on ``train`` (in-process; its report to stderr): seconds in all, and the
    seconds of the router version itself (head, calibration, fused fit; the rest is the abstention and split fits)."""
    import io

    from service.cli.main import main as fedqa

    path = write_jsonl(home / "router_train.jsonl", train)
    t0, printed = time.perf_counter(), io.StringIO()
    with encoder_patched(encoder), contextlib.redirect_stdout(printed):
        rc = fedqa(["train", "router", "--queries", str(path), "--quiet"])
    seconds = time.perf_counter() - t0
    print(printed.getvalue(), file=sys.stderr, end="")
    if rc:
        raise SystemExit(f"fedqa train router failed ({rc})")
    return seconds, float(json.loads(printed.getvalue().strip().splitlines()[-1])["seconds"])


def ask_timed(pipeline: Any, held: list[Any], out: dict[str, list]) -> None:
    """/ask generate:false per question, uis and the default alternately: milliseconds, domains searched, active."""
    from service.ask import answer
    from service.retrieval.strategies import DEFAULT_STRATEGY, StrategyName
    from service.schemas import AskRequest

    store = CountingStore(pipeline.store)
    pipeline.store = store
    for n, q in enumerate([*held[:WARMUP], *held]):
        for name, strategy in (("uis", StrategyName.UIS), ("default", DEFAULT_STRATEGY)):
            store.seen.clear()
            t0 = time.perf_counter()
            r = answer(pipeline, AskRequest(query=q.query, strategy=strategy, generate=False))
            ms = (time.perf_counter() - t0) * 1000
            if n < WARMUP:
                continue
            out[f"ms_{name}"].append(ms)
            if name == "default":
                out["searched"].append(len(store.seen))
                out["active"].append(len(r.routing.active_domains))
    pipeline.store = store.inner


def score_fold(pipeline: Any, held: list[Any], out: dict[str, list]) -> None:
    """quality.py's Acc@Top1 for uis, the default and oracle; the rank of the best gold domain under the router."""
    from quality import score

    from service.retrieval.strategies import DEFAULT_STRATEGY

    preps = pipeline.prepare_many([q.query for q in held])
    for q, prep in zip(held, preps, strict=True):
        for name, strategy in (("uis", "uis"), ("default", DEFAULT_STRATEGY.value), ("oracle", "oracle")):
            out[f"acc_{name}"].append(score(pipeline, q, prep, strategy, TOP_K)["acc_at_top1"])
        ranked = sorted(prep.probs, key=lambda d: (-prep.probs[d], d))
        out["rank"].append(1 + min(ranked.index(d) for d in q.domains))


def router_recall(ranks: list[int], m: int) -> tuple[dict[str, float], dict[str, int]]:
    """Share of questions with a gold product in the router's top k (k = 1, 5, 10% and 20% of M), and the k that
    covers 90/95/99% of them."""
    ks = sorted({min(m, k) for k in (1, 5, max(1, round(0.1 * m)), max(1, round(0.2 * m)))})
    recall = {str(k): round(float(np.mean([r <= k for r in ranks])), 4) for k in ks}
    ordered = sorted(ranks)
    need = {f"{p}%": ordered[max(0, math.ceil(p / 100 * len(ordered) - 1e-9) - 1)] for p in (90, 95, 99)}  # the smallest such k
    return recall, need


def prepare_vectors(settings: Any, encoder: CachedEncoder, docs_path: Path, qs: list[dict]) -> None:
    """Every passage, the router's synthetic questions and the dev questions through the vector cache."""
    from indexes.loaders import load_paths, segmentation_for
    from training.router_data import synthetic_router_queries

    passages = list(load_paths([docs_path], domain=None, segmentation=segmentation_for(settings, encoder.count_tokens)))
    encoder.embed_passages([p.text for p in passages], bulk=True)
    encoder.save()
    synthetic = synthetic_router_queries(passages, 2000, seed=0)  # what 'train router' makes (its defaults)
    encoder.embed_queries([q.query for q in synthetic] + [q["query"] for q in qs])
    encoder.save()


def one(args: argparse.Namespace) -> dict:
    """Split, ingest, train the routers of both folds, ask and score: the figures of M = ``args.one``."""
    import shutil

    from indexes.ingest import ingest
    from service.config import get_settings
    from service.loading import load_pipeline
    from service.queries import LabelledQuery

    m, t_all = args.one, time.perf_counter()
    docs, qs = load_slice(args.faq6, args.max_passages, args.max_questions, args.seed)
    sdocs, sqs = relabel(docs, qs, m)
    home = args.work / f"home-m{m}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    os.environ["FEDQA_HOME"] = str(home)
    get_settings.cache_clear()
    settings = get_settings()
    docs_path = write_jsonl(home / "docs.jsonl", sdocs)
    encoder = cached_encoder(settings, args.work / "vectors")
    prepare_vectors(settings, encoder, docs_path, sqs)
    t0 = time.perf_counter()
    report = ingest([docs_path], settings, encoder=encoder, progress=False)
    ingest_s = time.perf_counter() - t0
    out: dict[str, list] = defaultdict(list)
    train_s, version_s, rss = [], [], 0
    for held_ids in folds(qs):
        train_qs = [q for q in sqs if q["qid"] not in held_ids]
        seconds, own = train_router_library(settings, train_qs, encoder) if args.router_only else train_router(home, train_qs, encoder)
        train_s.append(seconds)
        version_s.append(own)
        held = [LabelledQuery(q["qid"], q["query"], q["domains"], q["gold_doc_ids"]) for q in sqs if q["qid"] in held_ids]
        pipeline = load_pipeline(settings, with_llm=False)
        try:
            t0 = time.perf_counter()
            ask_timed(pipeline, held, out)
            out["ask_s"].append(time.perf_counter() - t0)
            score_fold(pipeline, held, out)
            rss = max(rss, rss_bytes(os.getpid()))
        finally:
            pipeline.close()
    sizes = [sum(1 for d in sdocs if d["domain"] == s) for s in sorted({d["domain"] for d in sdocs})]
    recall, need = router_recall(out["rank"], m)
    return {
        "products": len(sizes),
        "passages": len(sdocs),
        "questions": len(out["rank"]),
        "ingest_s": round(ingest_s, 1),
        "rss_mib": round(rss / 2**20),
        "router_train_s": round(float(np.mean(train_s)), 1),
        "p50_ms_uis": round(percentile(out["ms_uis"], 50), 1),
        "p95_ms_uis": round(percentile(out["ms_uis"], 95), 1),
        "p50_ms_default": round(percentile(out["ms_default"], 50), 1),
        "p95_ms_default": round(percentile(out["ms_default"], 95), 1),
        "searched_mean": round(float(np.mean(out["searched"])), 2),
        "searched_fraction": round(float(np.mean(out["searched"])) / len(sizes), 4),
        "active_mean": round(float(np.mean(out["active"])), 2),
        "active_fraction": round(float(np.mean(out["active"])) / len(sizes), 4),
        "acc_at_1_uis": round(float(np.mean(out["acc_uis"])), 4),
        "acc_at_1_default": round(float(np.mean(out["acc_default"])), 4),
        "acc_at_1_oracle": round(float(np.mean(out["acc_oracle"])), 4),
        "router_recall_at_k": recall,
        "router_k_for": need,
        "product_passages": {"min": min(sizes), "median": int(np.median(sizes)), "max": max(sizes)},
        "indexed": sum(report.domains.values()),
        "retriever": "base MiniLM (shipped, not fine-tuned)",
        "seconds": {
            "encode_passages": round(encoder.seconds["passage"], 1),
            "encode_queries": round(encoder.seconds["query"], 1),
            "ingest": round(ingest_s, 1),
            "router_train_folds": [round(s, 1) for s in train_s],
            "router_version_folds": [round(s, 1) for s in version_s],
            "ask": round(sum(out["ask_s"]), 1),
            "total": round(time.perf_counter() - t_all, 1),
        },
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, nargs="+", default=[6, 50, 200], help="M: the numbers of products")
    ap.add_argument("--work", type=Path, required=True, help="homes and the vector cache go here")
    ap.add_argument("--faq6", type=Path, default=FAQ6)
    ap.add_argument("--max-passages", type=int, help="a slice of faq6 (smoke runs)")
    ap.add_argument("--max-questions", type=int, help="a seeded sample of the dev questions (smoke runs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--router-only", action="store_true", help="train the router version alone, without the abstention and split fits")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return 0
    env = {**os.environ, "FEDQA_LLM_BACKEND": "none", "FEDQA_ENCODER_CACHE_SIZE": "0", "OMP_WAIT_POLICY": "PASSIVE"}
    for m in args.products:
        cmd = [sys.executable, __file__, "--one", str(m), "--work", str(args.work), "--faq6", str(args.faq6), "--seed", str(args.seed)]
        for flag in ("max_passages", "max_questions"):
            if getattr(args, flag):
                cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        cmd += ["--router-only"] if args.router_only else []
        before = uptime()
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, env=env)
        if out.returncode != 0:
            raise SystemExit(f"M={m} failed ({out.returncode})")
        emit({**json.loads(out.stdout.strip().splitlines()[-1]), "uptime_before": before, "uptime_after": uptime()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
