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

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import expit

from indexes.rebuild import index_store
from service.artifacts import Registry
from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.encoder import Encoder
from service.retrieval.federated import search_domains
from service.routing.router import HeadRouter
from training.calibration import fit_calibration
from training.checkpoint import StopFlag, TrainingInterrupted
from training.configs import RouterConfig
from training.fusion import FitQuestion, fit_fusion
from training.metrics import router_metrics
from training.page_prior import DEPTH_GRID, Answered, fit_page_prior, index_pages, prior_questions
from training.router_data import embed_cached, group_of, label_matrix, queries_fingerprint, sample_weights, synthetic_router_queries
from training.router_heldout import out_of_fold_logits, small_split_warning, thin_domains
from training.versions import save_version

if TYPE_CHECKING:
    from service.retrieval.store import Store
    from training.refresh_feedback import RefreshFeedback

log = logging.getLogger("fedqa.training.router")


@dataclass
class HeldOut:
    """The held-out questions the fits see: vectors, calibrated probabilities, labels (all zeros: out of scope)."""

    queries: list[LabelledQuery]
    vectors: np.ndarray
    probs: np.ndarray
    labels: np.ndarray
    domains: list[str]


def bce_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Binary cross-entropy with logits, summed over domains, (weighted) mean over the batch."""
    per = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(dim=1)
    if weights is None:
        return per.mean()
    return (per * weights).sum() / weights.sum()


def train_head(
    vectors: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    domains: Sequence[str],
    config: RouterConfig,
    *,
    retriever: str | None,
    stop: StopFlag | None = None,
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


def fit_questions(settings: Settings, index_version: str, held: HeldOut, limit: int, *, store: Store | None = None) -> list[FitQuestion]:
    """The held-out questions with gold passages, each with every domain's top ``limit`` hits: the fusion-fitting
    questions (``store``: the index version, already open)."""
    with index_store(settings, index_version, store) as st:
        out = []
        for q, v, p in zip(held.queries, held.vectors, held.probs, strict=True):
            hits, _ = search_domains(st, v, held.domains, limit)
            if q.domains and q.gold_doc_ids:
                out.append(FitQuestion(p=p, hits=hits, domains=list(q.domains), gold=set(q.gold_doc_ids), vector=v))
        return out


def _active_index(settings: Settings, version: str | None = None) -> tuple[Registry, str, dict, list[str]]:
    """(registry, index version (default: the active one), its manifest, its domains), or ValueError without an index."""
    registry = Registry(settings.home_dir)
    index_version = version or registry.active()["index"]
    if not index_version:
        raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
    index = registry.manifest("index", index_version)
    return registry, index_version, index, sorted(index["domains"])


def _training_questions(
    settings: Settings,
    index_version: str,
    domains: Sequence[str],
    queries: Sequence[LabelledQuery],
    origins: Sequence[str],
    synthetic: Sequence[LabelledQuery] | None,
    cfg: RouterConfig,
    store: Store | None = None,
) -> tuple[list[LabelledQuery], list[str]]:
    """The questions of the index's domains (and out-of-scope ones) with their origins, plus the synthetic ones
    (None: heuristic questions from the index's passages; ``store``: the index version, already open)."""
    keep = [not q.domains or any(d in domains for d in q.domains) for q in queries]
    train = [q for q, k in zip(queries, keep, strict=True) if k]
    kept_origins = [o for o, k in zip(origins, keep, strict=True) if k]
    if not any(q.domains for q in train):
        raise ValueError(f"no labelled query belongs to the index's domains {list(domains)}")
    if synthetic is None:
        with index_store(settings, index_version, store) as st:
            passages = [p for d in domains for p in st.iter_passages(d)]
        synthetic = synthetic_router_queries(passages, cfg.synthetic_per_domain, seed=cfg.seed)
    return train + list(synthetic), kept_origins + ["synthetic"] * len(synthetic)


def _fit_held_out(
    settings: Settings,
    index_version: str,
    router: HeadRouter,
    val_vectors: np.ndarray,
    val: list[LabelledQuery],
    cfg: RouterConfig,
    metrics: dict[str, Any],
    logits: np.ndarray | None = None,
    answered: Answered | None = None,
    store: Store | None = None,
) -> None:
    """Calibration, the fused strategy's parameters and the page prior (counted on ``answered``), on the held-out
    questions; their reports go into ``metrics``, the fitted values into ``router``. ``logits``: the held-out
    questions' raw logits when they are not ``router``'s own (out of fold), else the router's."""
    from service.retrieval.store import StoreUnavailable

    domains = router.domains
    val_labels = label_matrix(val, domains)
    raw = router.raw_logits(val_vectors) if logits is None else logits
    calibration = fit_calibration(raw, val_labels)
    metrics["validation_uncalibrated"] = routing_report(expit(raw), val, domains)
    router.temperature, router.bias = calibration.temperature, list(calibration.bias)
    router.fitted = replace(router.fitted, calibration=calibration.as_dict())
    held = HeldOut(list(val), val_vectors, calibration.apply(raw), val_labels, domains)
    metrics["validation"] = routing_report(held.probs, val, domains)
    metrics["calibration"] = calibration.as_dict()
    try:
        fit_qs = fit_questions(settings, index_version, held, max(cfg.top_k, cfg.evidence_k, *DEPTH_GRID), store=store)
    except StoreUnavailable as exc:  # the embedded index is open in a running service
        log.warning("fused strategy not fitted: %s", exc)
        fit_qs, metrics["fusion"] = [], {"skipped": f"index {index_version} could not be searched: {exc}"}
    if fit_qs:
        params, report = fit_fusion(fit_qs, domains, top_k=cfg.top_k, evidence_k=cfg.evidence_k)
        router.fitted = replace(router.fitted, fusion=params)
        metrics["fusion"] = {**report, "params": params.as_dict()}
    if fit_qs and answered is not None and answered.questions:
        t0 = time.perf_counter()
        pages = index_pages(settings, index_version, answered, store=store)
        prior, metrics["page_prior"] = fit_page_prior(prior_questions(fit_qs, domains, router.fitted.fusion), pages, seed=cfg.seed)
        router.fitted = replace(router.fitted, page_prior=prior)
        metrics["page_prior"]["seconds"] = round(time.perf_counter() - t0, 1)


def _fit_out_of_fold(
    settings: Settings,
    index_version: str,
    router: HeadRouter,
    train: Sequence[LabelledQuery],
    origins: Sequence[str],
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
    cfg: RouterConfig,
    metrics: dict[str, Any],
    stop: StopFlag | None,
    answered: Answered,
    store: Store | None = None,
) -> None:
    """Calibration and fused parameters on every labelled question of ``train``, each scored by a head
    trained without its fold (``arrays``: the training rows' vectors, labels and weights)."""
    vectors, labels, weights = arrays
    labelled = [i for i, o in enumerate(origins) if o != "synthetic"]
    logits = out_of_fold_logits(vectors, labels, weights, labelled, router.domains, cfg, retriever=router.retriever, stop=stop)
    held = [train[i] for i in labelled]
    _fit_held_out(settings, index_version, router, vectors[labelled], held, cfg, metrics, logits=logits, answered=answered, store=store)


def _manifest(
    cfg: RouterConfig,
    domains: Sequence[str],
    retriever: str | None,
    index_version: str,
    train: Sequence[LabelledQuery],
    val: Sequence[LabelledQuery],
    metrics: Mapping[str, Any],
    data_fingerprint: str | None,
    data_path: str | None,
    feedback: RefreshFeedback | None = None,
) -> dict[str, Any]:
    """What a router version records beside its metrics (``feedback``: its counts, None when it was not read)."""
    return {
        "domains": list(domains),
        "retriever": retriever,
        "index": index_version,
        "base_model": f"head over retriever {retriever} query vectors",
        "config": asdict(cfg),
        "loss": "bce_with_logits summed over domains, group-balanced weights",
        "train_queries": len(train),
        "train_by_group": dict(Counter(group_of(q) for q in train)),
        "val_queries": len(val),
        "val_qids": [q.qid for q in val],
        "train_top1_accuracy": metrics["train"]["top1_accuracy"],
        "val_top1_accuracy": (metrics.get("validation") or {}).get("top1_accuracy"),
        "data_fingerprint": data_fingerprint or queries_fingerprint(train),
        "data": data_path,
        "feedback": feedback.counts() if feedback is not None else None,
    }


def _answered(settings: Settings, encoder: Encoder, questions: Sequence[LabelledQuery]) -> Answered:
    """The questions the page prior counts, with their query vectors as /ask embeds them (for the known answers)."""
    return Answered(questions, embed_cached(encoder, [q.query for q in questions], settings.home_dir / "cache" / "router-vectors"))


def _index_encoder(settings: Settings, registry: Registry, index: dict[str, Any]) -> Encoder:
    """The encoder the index version (its manifest ``index``) was embedded with: the router reads its vectors."""
    from service.retrieval.encoder import index_encoder_backend, load_encoder

    backend, calibration = index_encoder_backend(index), index.get("encoder_calibration")
    return load_encoder(settings, registry, index.get("retriever"), backend=backend, calibration=calibration)


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
    answered: Sequence[LabelledQuery] | None = None,
    index: str | None = None,
    store: Store | None = None,
    feedback: RefreshFeedback | None = None,
) -> str:
    """Train a router for the index version ``index`` (default: the active one; its domains, its retriever's
    vectors), fit calibration and fusion on ``val`` (out of fold when it is too small), save it as a new version and
    (``activate``) activate it. ``queries``: expert, cross and out-of-scope questions (``origins`` says which are
    ``synthetic``); ``synthetic``: more (None: heuristic ones). The page prior counts ``answered`` (None:
    ``queries``) and ``val``: the questions with gold passages. ``store``: the index version, already open (else it
    is opened, from a copy while a running service holds it). ``feedback``: what the home's feedback added (recorded)."""
    t0 = time.perf_counter()
    cfg = config or RouterConfig()
    if epochs is not None:
        cfg.epochs = epochs
    registry, index_version, manifest, domains = _active_index(settings, index)
    encoder = _index_encoder(settings, registry, manifest)
    origins = list(origins) if origins is not None else ["labelled"] * len(queries)
    val = [q for q in val if not q.domains or any(d in domains for d in q.domains)]
    thin = thin_domains(val, domains, cfg.min_val_per_domain) if val else []
    counted = _answered(settings, encoder, [q for q in [*(queries if answered is None else answered), *val] if q.gold_doc_ids])
    if thin:  # too few to fit on: the validation questions train too, and the fit is out of fold over every labelled one
        queries, origins, val = [*queries, *val], [*origins, *(["labelled"] * len(val))], [*val]
    with index_store(settings, index_version, store) as st:
        train, origins = _training_questions(settings, index_version, domains, queries, origins, synthetic, cfg, st)
        log.info("embedding %d training questions with retriever %s", len(train), encoder.version)
        cache = settings.home_dir / "cache" / "router-vectors"
        vectors = embed_cached(encoder, [q.query for q in train], cache, progress=progress)
        weights, labels = sample_weights(train, origins, cfg.labelled_weight), label_matrix(train, domains)
        router = train_head(vectors, labels, weights, domains, cfg, retriever=encoder.version, stop=stop)
        t_train = time.perf_counter() - t0

        metrics: dict[str, Any] = {"train": routing_report(router.predict_vectors(vectors), train, domains)}
        if thin:
            warning = small_split_warning(val, thin, cfg.min_val_per_domain, sum(o != "synthetic" for o in origins), cfg.kfold)
            _fit_out_of_fold(settings, index_version, router, train, origins, (vectors, labels, weights), cfg, metrics, stop, counted, st)
            metrics.update(held_out="kfold", warnings=[warning])
            val = []  # trained on: no question is held out of this version
        elif val:
            val_vectors = embed_cached(encoder, [q.query for q in val], cache)  # as /ask embeds them, like the training questions
            _fit_held_out(settings, index_version, router, val_vectors, val, cfg, metrics, answered=counted, store=st)
            metrics["held_out"] = "validation"
    metrics.update(train_seconds=round(time.perf_counter() - t0, 1), head_seconds=round(t_train, 1))
    manifest = _manifest(cfg, domains, encoder.version, index_version, train, val, metrics, data_fingerprint, data_path, feedback)
    return _save(registry, router, metrics, manifest, activate=activate)


def _save(registry: Registry, router: HeadRouter, metrics: dict[str, Any], manifest: dict[str, Any], *, activate: bool) -> str:
    """Save ``router`` as a new version with its metrics and manifest (``activate``: and activate it); its name."""

    def write(path: Path) -> None:
        router.save(path)
        router.version = path.name

    return save_version(registry, "router", write, metrics, manifest, activate=activate)
