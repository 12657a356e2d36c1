"""Train the router: a multi-label head over the retriever's query vectors, BCE summed over domains.

The router reads the vectors of the retriever the active index was embedded with (one encoder
forward per question serves routing and search), so training embeds its questions once with that
retriever and trains a small head in seconds; it can therefore learn from far more questions than
the expert ones: synthetic questions from every domain's passages (titles, first sentences; LLM
ones when the data build made them), joined cross-domain questions (both domains 1) and
out-of-scope questions (every domain 0), weighted so that each domain counts the same whatever its
number of questions. On held-out questions (the validation split; out-of-scope ones included) it
then fits the calibration (temperature and per-domain biases, training/calibration.py) and the fused strategy's parameters
(training/fusion.py), and any further fitter given (e.g. the "not covered" threshold), all stored
with the router version, with NLL/ECE before and after calibration in ``metrics.json``.

Refresh flow: data build -> train retriever -> index build -> train router (on the active index's retriever).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from service.artifacts import Registry
from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.encoder import Encoder
from service.retrieval.federated import search_domains
from service.retrieval.passage import Passage
from service.routing.router import HeadRouter
from training.calibration import fit_calibration
from training.checkpoint import StopFlag, TrainingInterrupted
from training.fusion import FitQuestion, fit_fusion
from training.metrics import router_metrics
from training.versions import save_version

if TYPE_CHECKING:
    from training.data.dataset import TrainingData

log = logging.getLogger("fedqa.training.router")


@dataclass
class RouterConfig:
    """How the head is trained (choices, not values fitted on data)."""

    hidden: int = 0  # linear: on faq6 dev it routed single-product questions better than a 256-unit MLP (docs/quality.md)
    epochs: int = 30
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    labelled_weight: float = 4.0  # an expert question weighs this many synthetic ones of its group
    synthetic_per_domain: int | None = 2000  # synthetic questions kept per domain (None: all)
    top_k: int = 5  # ranking depth the fused strategy is fitted for
    evidence_k: int = 20  # unified top-k whose per-domain share is evidence
    seed: int = 0


@dataclass
class HeldOut:
    """The held-out questions a fitter sees: vectors, calibrated probabilities, labels (all zeros: out of scope);
    ``extra["hits"]``: each question's per-domain top hits (domain -> list of Hit) when the index could be searched."""

    queries: list[LabelledQuery]
    vectors: np.ndarray
    probs: np.ndarray
    labels: np.ndarray
    domains: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


def bce_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Binary cross-entropy with logits, summed over domains, (weighted) mean over the batch."""
    per = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(dim=1)
    if weights is None:
        return per.mean()
    return (per * weights).sum() / weights.sum()


def label_matrix(queries: Sequence[LabelledQuery], domains: Sequence[str]) -> np.ndarray:
    """Multi-hot targets, shape (n, m); domains outside ``domains`` are ignored (no domain: all zeros)."""
    index = {d: i for i, d in enumerate(domains)}
    y = np.zeros((len(queries), len(domains)), dtype=np.float32)
    for r, q in enumerate(queries):
        for d in q.domains:
            if d in index:
                y[r, index[d]] = 1.0
    return y


def queries_fingerprint(queries: Sequence[LabelledQuery]) -> str:
    """sha256 of the training queries (qid, text, domains), for queries not from a training-set folder."""
    h = hashlib.sha256()
    for q in queries:
        h.update(json.dumps([q.qid, q.query, q.domains], ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()


def group_of(q: LabelledQuery) -> str:
    """Balancing group: the domain of a single-domain question, ``cross`` or ``out-of-scope``."""
    return "out-of-scope" if not q.domains else ("cross" if q.is_cross else q.domains[0])


def sample_weights(queries: Sequence[LabelledQuery], origins: Sequence[str], labelled_weight: float) -> np.ndarray:
    """Per-question weights: every group (domain, cross, out-of-scope) sums to 1; within a group an
    expert question weighs ``labelled_weight`` synthetic ones."""
    raw = np.array([1.0 if o == "synthetic" else labelled_weight for o in origins], dtype=np.float64)
    groups = [group_of(q) for q in queries]
    totals: Counter = Counter()
    for g, w in zip(groups, raw, strict=True):
        totals[g] += w
    return np.array([w / totals[g] for g, w in zip(groups, raw, strict=True)], dtype=np.float64)


def synthetic_router_queries(passages: Sequence[Passage], per_domain: int | None, *, seed: int = 0) -> list[LabelledQuery]:
    """Heuristic questions (heading question, first-sentence query) for a seeded sample of each domain's passages."""
    from training.data.synthetic import HeuristicQueryGenerator

    by_domain: dict[str, list[Passage]] = {}
    for p in passages:
        by_domain.setdefault(p.domain, []).append(p)
    out: list[LabelledQuery] = []
    gen = HeuristicQueryGenerator()
    for d in sorted(by_domain):
        group = sorted(by_domain[d], key=lambda p: p.doc_id)
        qs = [LabelledQuery(f"rsyn-{d}-{i:05d}", s.query, [d], [s.doc_id]) for i, s in enumerate(gen.generate(group))]
        if per_domain is not None and len(qs) > per_domain:
            qs = random.Random(f"{seed}:router-synthetic:{d}").sample(qs, per_domain)
        out.extend(qs)
    return out


def embed_cached(encoder: Encoder, texts: Sequence[str], cache_dir: Path | None, *, progress: bool = False) -> np.ndarray:
    """Query vectors of ``texts``, reused from ``cache_dir`` when the same texts were embedded by the same
    retriever before (re-training with other settings then costs seconds, not minutes)."""
    h = hashlib.sha256(f"{encoder.version}\0{encoder.path}\0".encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\n")
    f = cache_dir / f"{h.hexdigest()}.npy" if cache_dir else None
    if f is not None and f.is_file():
        return np.load(f)
    vectors = encoder.embed_passages(list(texts), batch_size=64, progress=progress)
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(f)
    return vectors


def train_head(
    vectors: np.ndarray, labels: np.ndarray, weights: np.ndarray, domains: Sequence[str], config: RouterConfig, *,
    retriever: str | None, stop: StopFlag | None = None,
) -> HeadRouter:
    """Fit the head with weighted BCE (AdamW, shuffled mini-batches of at most ``batch_size``, seeded)."""
    torch.manual_seed(config.seed)
    router = HeadRouter.new(domains, vectors.shape[1], hidden=config.hidden, retriever=retriever)
    x = torch.from_numpy(np.asarray(vectors, dtype=np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.float32))
    w = torch.from_numpy(np.asarray(weights, dtype=np.float32))
    opt = torch.optim.AdamW(router.module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    gen = torch.Generator().manual_seed(config.seed)
    batch = min(config.batch_size, max(32, len(x) // 32))  # small sets (the demo) still get enough steps per epoch
    router.module.train()
    for _ in range(config.epochs):
        order = torch.randperm(len(x), generator=gen)
        for b in range(0, len(x), batch):
            idx = order[b : b + batch]
            loss = bce_loss(router.logits(x[idx]), y[idx], w[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if stop is not None and stop.requested:
                raise TrainingInterrupted(None)
    router.module.eval()
    return router


def routing_report(probs: np.ndarray, queries: Sequence[LabelledQuery], domains: Sequence[str]) -> dict:
    """Routing metrics of in-scope questions (training/metrics.py), plus the mean max-p of out-of-scope ones."""
    scoped = [i for i, q in enumerate(queries) if q.domains]
    out = router_metrics(probs[scoped], label_matrix([queries[i] for i in scoped], domains), domains)
    out["cross_domain_queries"] = sum(1 for i in scoped if queries[i].is_cross)
    oos = [i for i, q in enumerate(queries) if not q.domains]
    if oos:
        out["out_of_scope"] = {"queries": len(oos), "mean_max_p": round(float(probs[oos].max(axis=1).mean()), 4)}
    return out


def fit_questions(settings: Settings, index_version: str, held: HeldOut, limit: int) -> list[FitQuestion]:
    """Every domain's top ``limit`` hits of each held-out question (in ``held.extra["hits"]``, aligned with
    ``held.queries``), and the in-scope ones with gold passages as fusion-fitting questions."""
    from service.retrieval.backends import open_backend

    store = open_backend(settings).open(index_version)
    try:
        out = []
        held.extra["hits"] = []
        for q, v, p in zip(held.queries, held.vectors, held.probs, strict=True):
            hits, _ = search_domains(store, v, held.domains, limit)
            held.extra["hits"].append(hits)  # every held-out question's per-domain hits, for further fitters
            if q.domains and q.gold_doc_ids:
                out.append(FitQuestion(p=p, hits=hits, domains=list(q.domains), gold=set(q.gold_doc_ids)))
        return out
    finally:
        store.close()


def train_and_activate(
    settings: Settings,
    queries: Sequence[LabelledQuery],
    *,
    val: Sequence[LabelledQuery] = (),
    origins: Sequence[str] | None = None,
    synthetic: Sequence[LabelledQuery] | None = None,
    config: RouterConfig | None = None,
    epochs: int | None = None,
    progress: bool = True,
    activate: bool = True,
    data_fingerprint: str | None = None,
    data_path: str | None = None,
    domains: Sequence[str] | None = None,
    stop: StopFlag | None = None,
    fitters: Mapping[str, Callable[[HeldOut], dict]] | None = None,
) -> str:
    """Train a router for the active index (its domains, its retriever's vectors), fit calibration and
    fusion on ``val``, save it as a new version and activate it.

    ``queries``: training questions (expert, cross, out-of-scope with no domain; ``origins`` says which
    are ``synthetic``); ``synthetic``: more synthetic questions (None: heuristic ones made from the
    index's passages). ``fitters``: name -> function of the held-out set, whose result is stored under
    ``fitted[name]`` (e.g. the answer's "not covered" threshold).
    """
    from service.pipeline import index_encoder_backend, load_encoder
    from service.retrieval.backends import open_backend

    t0 = time.perf_counter()
    cfg = config or RouterConfig()
    if epochs is not None:
        cfg.epochs = epochs
    registry = Registry(settings.home_dir)
    index = registry.active_manifest("index")
    if not index:
        raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
    index_version = registry.active()["index"]
    domains = sorted(index["domains"])
    encoder: Encoder = load_encoder(settings, registry, index.get("retriever"), backend=index_encoder_backend(index))
    origins = list(origins) if origins is not None else ["labelled"] * len(queries)
    train = [q for q in queries if not q.domains or any(d in domains for d in q.domains)]
    origins = [o for q, o in zip(queries, origins, strict=True) if not q.domains or any(d in domains for d in q.domains)]
    if not any(q.domains for q in train):
        raise ValueError(f"no labelled query belongs to the index's domains {domains}")
    if not index_version:
        raise ValueError("no active index version")
    if synthetic is None:
        store = open_backend(settings).open(index_version)
        try:
            passages = [p for d in domains for p in store.iter_passages(d)]
        finally:
            store.close()
        synthetic = synthetic_router_queries(passages, cfg.synthetic_per_domain, seed=cfg.seed)
    train = train + list(synthetic)
    origins = origins + ["synthetic"] * len(synthetic)
    log.info("embedding %d training questions with retriever %s", len(train), encoder.version)
    cache = settings.home_dir / "cache" / "router-vectors"
    vectors = embed_cached(encoder, [q.query for q in train], cache, progress=progress)
    labels = label_matrix(train, domains)
    weights = sample_weights(train, origins, cfg.labelled_weight)
    router = train_head(vectors, labels, weights, domains, cfg, retriever=encoder.version, stop=stop)
    t_train = time.perf_counter() - t0

    metrics: dict[str, Any] = {"train": routing_report(router.predict_vectors(vectors), train, domains)}
    val = [q for q in val if not q.domains or any(d in domains for d in q.domains)]
    if val:
        val_vectors = embed_cached(encoder, [q.query for q in val], cache)
        val_labels = label_matrix(val, domains)
        calibration = fit_calibration(router.raw_logits(val_vectors), val_labels)
        metrics["validation_uncalibrated"] = routing_report(router.predict_vectors(val_vectors), val, domains)
        router.temperature, router.bias = calibration.temperature, list(calibration.bias)
        router.fitted["calibration"] = calibration.as_dict()
        held = HeldOut(list(val), val_vectors, router.predict_vectors(val_vectors), val_labels, domains)
        metrics["validation"] = routing_report(held.probs, val, domains)
        metrics["calibration"] = calibration.as_dict()
        from service.retrieval.store import StoreUnavailable

        try:
            fit_qs = fit_questions(settings, index_version, held, max(cfg.top_k, cfg.evidence_k))
        except StoreUnavailable as exc:  # the embedded index is open in a running service
            log.warning("fused strategy not fitted: %s", exc)
            fit_qs, metrics["fusion"] = [], {"skipped": f"index {index_version} could not be searched: {exc}"}
        if fit_qs:
            params, report = fit_fusion(fit_qs, domains, top_k=cfg.top_k, evidence_k=cfg.evidence_k)
            router.fitted["fusion"] = params.as_dict()
            metrics["fusion"] = {**report, "params": params.as_dict()}
        for name, fit in (fitters or {}).items():
            router.fitted[name] = fit(held)
    metrics["train_seconds"] = round(time.perf_counter() - t0, 1)
    metrics["head_seconds"] = round(t_train, 1)

    def write(path) -> None:  # noqa: ANN001
        router.save(path)
        router.version = path.name

    val_m = metrics.get("validation") or {}
    return save_version(
        registry,
        "router",
        write,
        metrics,
        {
            "domains": domains,
            "retriever": encoder.version,
            "index": index_version,
            "base_model": f"head over retriever {encoder.version} query vectors",
            "config": asdict(cfg),
            "loss": "bce_with_logits summed over domains, group-balanced weights",
            "train_queries": len(train),
            "train_by_group": dict(Counter(group_of(q) for q in train)),
            "val_queries": len(val),
            "val_qids": [q.qid for q in val],
            "train_top1_accuracy": metrics["train"]["top1_accuracy"],
            "val_top1_accuracy": val_m.get("top1_accuracy"),
            "data_fingerprint": data_fingerprint or queries_fingerprint(train),
            "data": data_path,
        },
        activate=activate,
    )


def stratified_split(queries: Sequence[LabelledQuery], fraction: float, seed: int = 0) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """(train, validation) of labelled queries, a seeded share per domain (see :func:`training.data.split.split_queries`)."""
    from training.data.split import split_queries

    return split_queries(queries, fraction, seed=seed)


def router_queries_from_data(
    data: TrainingData, *, synthetic_per_domain: int | None = 2000, seed: int = 0  # noqa: F821
) -> tuple[list[LabelledQuery], list[str], list[LabelledQuery]]:
    """(expert questions, their origins, synthetic questions) of a training-set folder.

    Expert rows are the labelled, cross-domain (given and joined) and out-of-scope questions; of the
    synthetic ones a seeded sample of at most ``synthetic_per_domain`` per domain is kept (None: all).
    """
    expert: list[LabelledQuery] = []
    origins: list[str] = []
    synthetic: dict[str, list[LabelledQuery]] = {}
    for q, origin in zip(data.router_rows, data.router_origins, strict=True):
        if origin == "synthetic":
            synthetic.setdefault(q.domains[0], []).append(q)
        else:
            expert.append(q)
            origins.append(origin)
    out: list[LabelledQuery] = []
    for domain in sorted(synthetic):
        group = synthetic[domain]
        if synthetic_per_domain is not None and len(group) > synthetic_per_domain:
            group = random.Random(f"{seed}:router:{domain}").sample(group, synthetic_per_domain)
        out.extend(group)
    return expert, origins, out
