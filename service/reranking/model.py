"""Running a reranker version: cross-encoder logits for (question, passage) pairs, and the reranked ranking.

A version folder holds the sentence-transformers ``CrossEncoder`` (``model/``), its ONNX int8 export
(``onnx/``, :mod:`service.reranking.onnx_export`) and the fitted :class:`~service.reranking.params.RerankParams`
(``rerank.json``). ONNX Runtime runs it when the export is there (thread-safe, no lock); otherwise PyTorch,
under the process's model lock.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from service.compute import MODEL_LOCK
from service.compute import available_cpus as default_threads  # one request's pairs are scored on every CPU
from service.reranking.params import PARAMS_FILE, RerankParams, order_by
from service.retrieval.onnx_encoder import ONNX_FILE
from service.retrieval.passage import RankedHit, descending

log = logging.getLogger("fedqa.rerank")

MODEL_DIR = "model"
ONNX_DIR = "onnx"


class RerankBackend(str, Enum):
    """The runtime that computes the cross-encoder's logits."""

    ONNX = "onnx"
    TORCH = "torch"


def pair_features(tokenizer: Any, query: str, texts: Sequence[str], max_length: int) -> dict[str, np.ndarray]:
    """Token ids of (query, passage) pairs cut to ``max_length`` tokens (the passage gives way first), as int64 arrays."""
    enc = tokenizer([query] * len(texts), list(texts), padding=True, truncation="longest_first", max_length=max_length, return_tensors="np")
    return {k: np.asarray(v, dtype=np.int64) for k, v in enc.items()}


class Reranker:
    """A trained cross-encoder version and its fitted combination."""

    def __init__(self, path: Path, version: str, params: RerankParams, *, backend: RerankBackend | None = None, threads: int | None = None) -> None:
        self.path = Path(path)
        self.version = version
        self.params = params
        self._session: Any = None
        self._model: Any = None
        self.threads = threads or default_threads()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path / MODEL_DIR), local_files_only=True)
        onnx_file = self.path / ONNX_DIR / ONNX_FILE
        if backend is not RerankBackend.TORCH and onnx_file.is_file():
            from service.retrieval.onnx_encoder import cpu_session

            self._session = cpu_session(onnx_file, self.threads)
            self._inputs = [i.name for i in self._session.get_inputs()]
            self.backend = RerankBackend.ONNX
        else:
            self.backend = RerankBackend.TORCH

    @classmethod
    def load(cls, path: Path, version: str, *, backend: RerankBackend | None = None, threads: int | None = None) -> Reranker:
        """The version in ``path`` (its ``rerank.json`` must exist); ``threads``: ONNX Runtime's intra-op threads."""
        params = RerankParams.from_json(json.loads((Path(path) / PARAMS_FILE).read_text(encoding="utf-8")), f"{Path(path).name}/{PARAMS_FILE}")
        return cls(path, version, params, backend=backend, threads=threads)

    def with_params(self, params: RerankParams) -> Reranker:
        """The same model with other fitted parameters (fitting, tests)."""
        other = copy.copy(self)
        other.params = params
        return other

    def logits(self, query: str, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """The cross-encoder's logit for each (query, text) pair."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out = []
        for i in range(0, len(texts), batch_size):
            feats = pair_features(self.tokenizer, query, texts[i : i + batch_size], self.params.max_length)
            out.append(self._onnx(feats) if self._session is not None else self._torch(feats))
        return np.concatenate(out).astype(np.float32)

    def _onnx(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        feed = {n: feats[n] if n in feats else np.zeros_like(feats["input_ids"]) for n in self._inputs}
        return np.asarray(self._session.run(None, feed)[0]).reshape(-1)

    def _torch(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        with MODEL_LOCK, torch.inference_mode():
            if self._model is None:
                from transformers import AutoModelForSequenceClassification

                self._model = AutoModelForSequenceClassification.from_pretrained(str(self.path / MODEL_DIR), local_files_only=True).eval()
            logits = self._model(**{k: torch.from_numpy(v) for k, v in feats.items()}).logits
        return logits.reshape(-1).float().numpy()

    def rerank(self, query: str, hits: Sequence[RankedHit], top_k: int) -> list[RankedHit]:
        """The top ``params.depth`` of ``hits`` reordered by ``U + weight * ce`` (U: the merge's order key, the fused rank
        score with a lexical index; each with its calibrated score, its logit as the feature ``rerank`` and the combined
        score as its ``rank_score``), then the rest in their order (their ``rank_score`` at most the last reranked one's:
        :func:`~service.retrieval.passage.descending`); the first ``top_k``."""
        head = self._scored_head(query, hits)
        combined = self.params.combined([h.order_key for h in head], [h.features.rerank or 0.0 for h in head]).tolist()
        scored = [replace(head[i], rank_score=combined[i]) for i in order_by(combined)]
        return descending(scored + list(hits[self.params.depth :]))[:top_k]

    def scored(self, query: str, hits: Sequence[RankedHit], top_k: int) -> list[RankedHit]:
        """The first ``top_k`` of ``hits`` in their order, the top ``params.depth`` with the reranker's calibrated score
        and its logit as the feature ``rerank`` (what "not covered" reads), their ``rank_score`` unchanged: for an
        order that stands (a ranking model's, whose score does not read the logit)."""
        return (self._scored_head(query, hits) + list(hits[self.params.depth :]))[:top_k]

    def _scored_head(self, query: str, hits: Sequence[RankedHit]) -> list[RankedHit]:
        """The top ``params.depth`` of ``hits`` in their order, each with its calibrated score and its logit as the
        feature ``rerank``."""
        head = hits[: self.params.depth]
        ce = self.logits(query, [self.params.passage_text(h.passage.title, h.passage.text) for h in head]).tolist()
        return [
            replace(h, rerank_score=round(self.params.calibrated(v), 6), features=replace(h.features, rerank=v))
            for h, v in zip(head, ce, strict=True)
        ]
