"""Train the router: multi-label BERT classifier, binary cross-entropy summed over domains.

``fedqa train router`` trains on labelled queries (``--queries``) or on a training set from
``fedqa data build`` (``--data``: labelled + synthetic + cross-domain queries), reports on a
validation split (per-domain precision/recall/F1, micro/macro F1, top-1 domain accuracy, ECE),
and saves the model as a new router version with its metrics beside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from service.artifacts import Registry
from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.encoder import packaged_minilm_path
from service.routing.router import BertRouter
from training.checkpoint import StopFlag, TrainingInterrupted, load_checkpoint_state, load_extra, save_checkpoint
from training.metrics import router_metrics
from training.versions import save_version

if TYPE_CHECKING:
    from training.data.dataset import TrainingData

log = logging.getLogger("fedqa.training.router")


def bce_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy with logits, summed over domains, averaged over the batch."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(dim=1).mean()


def label_matrix(queries: Sequence[LabelledQuery], domains: Sequence[str]) -> np.ndarray:
    """Multi-hot targets, shape (n, m); domains outside ``domains`` are ignored."""
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


def train_router(
    queries: Sequence[LabelledQuery],
    domains: Sequence[str],
    *,
    base_model: str | Path | None = None,
    epochs: int = 8,
    batch_size: int = 16,
    lr: float = 5e-5,
    head_lr: float = 2e-3,
    seed: int = 0,
    progress: bool = True,
    stop: StopFlag | None = None,
    checkpoint_dir: Path | None = None,
    checkpoint_every: int = 0,
    resume: Path | None = None,
    freeze_embeddings: bool = True,
) -> BertRouter:
    """Fine-tune encoder and head on labelled queries; returns the trained router.

    With ``checkpoint_dir`` a checkpoint is written after every epoch (and every
    ``checkpoint_every`` steps); when ``stop`` is requested (Ctrl-C) the loop writes one and raises
    :class:`TrainingInterrupted`. ``resume`` continues from such a checkpoint (same data and seed).
    """
    usable = [q for q in queries if any(d in domains for d in q.domains)]
    if not usable:
        raise ValueError(f"no labelled query belongs to the index's domains {list(domains)}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0}
    if resume:
        state.update(load_checkpoint_state(resume))
        router = BertRouter.load(Path(resume) / "model")
        if list(router.domains) != list(domains):
            raise ValueError(f"checkpoint {resume} routes {router.domains}, not {list(domains)}")
    else:
        router = BertRouter.new(base_model or packaged_minilm_path(), domains)
    model = router.model
    if freeze_embeddings:  # the word-embedding table is half the weights: frozen, steps are faster and small data overfits less
        model.get_input_embeddings().weight.requires_grad_(False)
    head = [p for n, p in model.named_parameters() if n.startswith("classifier") and p.requires_grad]
    body = [p for n, p in model.named_parameters() if not n.startswith("classifier") and p.requires_grad]
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.01)
    if resume and (saved := load_extra(Path(resume), "optimizer")) is not None:
        opt.load_state_dict(saved)
    y = torch.from_numpy(label_matrix(usable, domains))
    texts = [q.query for q in usable]
    per_epoch = (len(usable) + batch_size - 1) // batch_size
    stop = stop or StopFlag()

    def checkpoint() -> Path | None:
        if checkpoint_dir is None:
            return None
        return save_checkpoint(
            Path(checkpoint_dir), router.save, {**state, "seed": seed, "epochs": epochs, "kind": "router"}, {"optimizer": opt.state_dict()}
        )

    model.train()
    with tqdm(total=epochs * per_epoch, initial=state["global_step"], desc="training router", unit="step", disable=not progress) as bar:
        while state["epoch"] < epochs:
            order = list(range(len(usable)))
            random.Random(f"{seed}:{state['epoch']}").shuffle(order)
            total, seen = 0.0, 0
            for b in range(state["step_in_epoch"], per_epoch):
                idx = order[b * batch_size : (b + 1) * batch_size]
                loss = bce_loss(router.logits([texts[j] for j in idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, seen = total + loss.item() * len(idx), seen + len(idx)
                state["step_in_epoch"], state["global_step"] = b + 1, state["global_step"] + 1
                bar.update(1)
                bar.set_postfix(epoch=state["epoch"] + 1, loss=f"{total / seen:.4f}")
                if stop.requested:
                    model.eval()
                    raise TrainingInterrupted(checkpoint())
                if checkpoint_every and state["global_step"] % checkpoint_every == 0:
                    checkpoint()
            state["epoch"], state["step_in_epoch"] = state["epoch"] + 1, 0
            if state["epoch"] < epochs:
                checkpoint()
    model.eval()
    return router


def top1_accuracy(router: BertRouter, queries: Sequence[LabelledQuery]) -> float:
    """Share of queries whose most probable domain is one of their labelled domains."""
    if not queries:
        return float("nan")
    p = router.predict([q.query for q in queries])
    hits = [router.domains[int(np.argmax(row))] in q.domains for row, q in zip(p, queries, strict=True)]
    return float(np.mean(hits))


def evaluate_router(router: BertRouter, queries: Sequence[LabelledQuery], *, batch_size: int = 64) -> dict:
    """Routing metrics of ``router`` on labelled queries (see :func:`training.metrics.router_metrics`)."""
    queries = [q for q in queries if any(d in router.domains for d in q.domains)]
    probs = np.concatenate(
        [router.predict([q.query for q in queries[i : i + batch_size]]) for i in range(0, len(queries), batch_size)]
    ) if queries else np.zeros((0, len(router.domains)))
    out = router_metrics(probs, label_matrix(queries, router.domains), router.domains)
    out["cross_domain_queries"] = sum(1 for q in queries if q.is_cross)
    return out


def stratified_split(queries: Sequence[LabelledQuery], fraction: float, seed: int = 0) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """(train, validation) of labelled queries, a seeded share per domain (see :func:`training.data.split.split_queries`)."""
    from training.data.split import split_queries

    return split_queries(queries, fraction, seed=seed)


def train_and_activate(
    settings: Settings,
    queries: Sequence[LabelledQuery],
    *,
    epochs: int = 8,
    progress: bool = True,
    activate: bool = True,
    val: Sequence[LabelledQuery] = (),
    data_fingerprint: str | None = None,
    data_path: str | None = None,
    domains: Sequence[str] | None = None,
    batch_size: int = 16,
    seed: int = 0,
    stop: StopFlag | None = None,
    resume: Path | None = None,
) -> str:
    """Train a router for the active index's domains, save it as a new version and activate it.

    The version folder holds the model, ``domains.json`` and ``metrics.json`` (validation and
    training metrics); the manifest records the metrics, the base model and the training-data
    fingerprint. A Ctrl-C leaves a checkpoint under ``$FEDQA_HOME/checkpoints/router`` and no version.
    """
    t0 = time.perf_counter()
    registry = Registry(settings.home_dir)
    index = registry.active_manifest("index")
    if index:
        domains = sorted(index["domains"])
    elif not domains:
        raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
    domains = sorted(domains)
    base = settings.router_base_model or str(packaged_minilm_path())
    router = train_router(
        queries, domains, base_model=base, epochs=epochs, batch_size=batch_size, seed=seed, progress=progress, stop=stop,
        checkpoint_dir=settings.home_dir / "checkpoints" / "router", resume=resume,
    )
    metrics: dict[str, Any] = {
        "validation": evaluate_router(router, val) if val else None,
        "train": evaluate_router(router, queries),
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    def write(path: Path) -> None:
        router.save(path)
        router.version = path.name

    return save_version(
        registry,
        "router",
        write,
        metrics,
        {
            "domains": domains,
            "base_model": base,
            "epochs": epochs,
            "batch_size": batch_size,
            "seed": seed,
            "loss": "bce_with_logits summed over domains",
            "train_queries": len(queries),
            "val_queries": len(val),
            "train_top1_accuracy": metrics["train"]["top1_accuracy"],
            "val_top1_accuracy": metrics["validation"]["top1_accuracy"] if metrics["validation"] else None,
            "data_fingerprint": data_fingerprint or queries_fingerprint(queries),
            "data": data_path,
        },
        activate=activate,
    )


def router_queries_from_data(
    data: TrainingData, *, labelled_repeat: int = 2, synthetic_per_domain: int | None = 150, seed: int = 0
) -> list[LabelledQuery]:
    """Router training queries of a training-set folder.

    Expert (labelled and cross-domain) queries ``labelled_repeat`` times each, plus a seeded sample
    of at most ``synthetic_per_domain`` synthetic queries per domain (None: all): enough for the
    router to know every product (a product without labelled questions is learnt from these alone).
    """
    out: list[LabelledQuery] = []
    synthetic: dict[str, list[LabelledQuery]] = {}
    for q, origin in zip(data.router_rows, data.router_origins, strict=True):
        if origin == "synthetic":
            synthetic.setdefault(q.domains[0], []).append(q)
        else:
            out.extend([q] * max(1, labelled_repeat))
    for domain in sorted(synthetic):
        group = synthetic[domain]
        if synthetic_per_domain is not None and len(group) > synthetic_per_domain:
            group = random.Random(f"{seed}:router:{domain}").sample(group, synthetic_per_domain)
        out.extend(group)
    return out
