"""The router's training questions: labels, balancing weights, heuristic synthetic questions, the question
vectors (cached per retriever) and the split of a training-set folder into expert and synthetic rows."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from service.queries import LabelledQuery
from service.retrieval.encoder import Encoder
from service.retrieval.passage import Passage

if TYPE_CHECKING:
    from training.data.dataset import TrainingData


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
    """Query vectors of ``texts`` as ``/ask`` computes them (:meth:`Encoder.embed_queries`: on ONNX one question
    per batch, since int8 activations are quantised per batch), reused from ``cache_dir`` when the same texts were
    embedded by the same retriever and runtime (ONNX export recipe included) before (re-training with other settings then costs seconds)."""
    h = hashlib.sha256(f"{encoder.version}\0{encoder.path}\0{encoder.query_runtime}\0served\0".encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\n")
    f = cache_dir / f"{h.hexdigest()}.npy" if cache_dir else None
    if f is not None and f.is_file():
        return np.load(f)
    vectors = _embed_served(encoder, list(texts), progress=progress)
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(f)
    return vectors


def _embed_served(encoder: Encoder, texts: list[str], *, progress: bool, chunk: int = 256) -> np.ndarray:
    from tqdm.auto import tqdm

    out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
    with tqdm(total=len(texts), desc="embedding", unit="question", disable=not progress) as bar:
        for start in range(0, len(texts), chunk):
            out[start : start + chunk] = encoder.embed_queries(texts[start : start + chunk])
            bar.update(min(chunk, len(texts) - start))
    return out


def stratified_split(queries: Sequence[LabelledQuery], fraction: float, seed: int = 0) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """(train, validation) of labelled queries, a seeded share per domain (see :func:`training.data.split.split_queries`)."""
    from training.data.split import split_queries

    return split_queries(queries, fraction, seed=seed)


def router_queries_from_data(
    data: TrainingData, *, synthetic_per_domain: int | None = 2000, seed: int = 0
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
