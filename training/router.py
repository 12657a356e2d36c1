"""Train the router: multi-label BERT classifier, binary cross-entropy summed over domains."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from service.artifacts import Registry
from service.config import Settings
from service.queries import LabelledQuery
from service.retrieval.encoder import packaged_minilm_path
from service.routing.router import BertRouter

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
) -> BertRouter:
    """Fine-tune encoder and head on labelled queries; returns the trained router."""
    usable = [q for q in queries if any(d in domains for d in q.domains)]
    if not usable:
        raise ValueError(f"no labelled query belongs to the index's domains {list(domains)}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    router = BertRouter.new(base_model or packaged_minilm_path(), domains)
    model = router.model
    head = [p for n, p in model.named_parameters() if n.startswith("classifier")]
    body = [p for n, p in model.named_parameters() if not n.startswith("classifier")]
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.01)
    y = torch.from_numpy(label_matrix(usable, domains))
    texts = [q.query for q in usable]
    order = list(range(len(usable)))
    model.train()
    steps = epochs * ((len(order) + batch_size - 1) // batch_size)
    with tqdm(total=steps, desc="training router", unit="step", disable=not progress) as bar:
        for epoch in range(epochs):
            random.shuffle(order)
            total = 0.0
            for i in range(0, len(order), batch_size):
                idx = order[i : i + batch_size]
                loss = bce_loss(router.logits([texts[j] for j in idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
                bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{total / len(order):.4f}")
    model.eval()
    return router


def top1_accuracy(router: BertRouter, queries: Sequence[LabelledQuery]) -> float:
    """Share of queries whose most probable domain is one of their labelled domains."""
    if not queries:
        return float("nan")
    p = router.predict([q.query for q in queries])
    hits = [router.domains[int(np.argmax(row))] in q.domains for row, q in zip(p, queries)]
    return float(np.mean(hits))


def train_and_activate(
    settings: Settings, queries: Sequence[LabelledQuery], *, epochs: int = 8, progress: bool = True, activate: bool = True
) -> str:
    """Train a router for the active index's domains, save it as a new version and activate it."""
    registry = Registry(settings.home_dir)
    index = registry.active_manifest("index")
    if not index:
        raise ValueError("no index yet: ingest documents first (fedqa ingest PATH)")
    domains = sorted(index["domains"])
    base = settings.router_base_model or str(packaged_minilm_path())
    router = train_router(queries, domains, base_model=base, epochs=epochs, progress=progress)
    version = registry.new_version("router")
    path = registry.path("router", version)
    router.save(path)
    router.version = version
    registry.complete(
        "router",
        version,
        {
            "domains": domains,
            "base_model": base,
            "epochs": epochs,
            "train_queries": len(queries),
            "train_top1_accuracy": top1_accuracy(router, queries),
        },
    )
    if activate:
        registry.activate("router", version)
    return version
