"""The router: F(q) = sigmoid(W * BERT(q)[CLS] + b), one independent probability per domain.

A transformers ``AutoModelForSequenceClassification`` with ``problem_type="multi_label_classification"``
(BCE-with-logits loss in training, a sigmoid at inference) on the shipped MiniLM BERT encoder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from service.compute import MODEL_LOCK

DOMAINS_FILE = "domains.json"


class Router(Protocol):
    """Gives p_j = P(domain j | query) for each of its domains."""

    domains: list[str]
    version: str | None

    def predict(self, queries: Sequence[str]) -> np.ndarray:
        """Probabilities, shape (len(queries), len(domains)), each in [0, 1], independent."""
        ...


class BertRouter:
    """Multi-label BERT classifier over the domains."""

    max_length = 128

    def __init__(self, model, tokenizer, domains: list[str], version: str | None = None) -> None:  # noqa: ANN001
        self.model = model
        self.tokenizer = tokenizer
        self.domains = list(domains)
        self.version = version

    @classmethod
    def new(cls, base_model: str | Path, domains: Sequence[str]) -> BertRouter:
        """An untrained router head on the base encoder (for training)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        domains = list(domains)
        if not domains:
            raise ValueError("a router needs at least one domain")
        tokenizer = AutoTokenizer.from_pretrained(str(base_model), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base_model),
            num_labels=len(domains),
            problem_type="multi_label_classification",
            id2label=dict(enumerate(domains)),
            label2id={d: i for i, d in enumerate(domains)},
            local_files_only=True,
        )
        return cls(model, tokenizer, domains)

    @classmethod
    def load(cls, path: str | Path, version: str | None = None) -> BertRouter:
        """Load a trained router saved with :meth:`save`."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from service.artifacts import require_model_files

        path = Path(path)
        if not (path / DOMAINS_FILE).is_file():
            raise FileNotFoundError(f"no trained router at {path} (missing {DOMAINS_FILE})")
        require_model_files(path, "router")
        domains = json.loads((path / DOMAINS_FILE).read_text(encoding="utf-8"))
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(str(path), local_files_only=True)
        model.eval()
        return cls(model, tokenizer, domains, version)

    def save(self, path: str | Path) -> None:
        """Save weights, tokenizer and the domain list."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        (path / DOMAINS_FILE).write_text(json.dumps(self.domains), encoding="utf-8")

    def logits(self, queries: Sequence[str]) -> torch.Tensor:
        """Raw logits W * BERT(q)[CLS] + b (with gradients if the model is training)."""
        batch = self.tokenizer(
            list(queries), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return self.model(**batch).logits

    def predict(self, queries: Sequence[str]) -> np.ndarray:
        if not queries:
            return np.zeros((0, len(self.domains)), dtype=np.float64)
        self.model.eval()
        with MODEL_LOCK, torch.inference_mode():
            probs = torch.sigmoid(self.logits(queries))
        return probs.double().numpy()


class UniformRouter:
    """Stand-in when no router is trained yet: every domain equally likely, so every domain is searched."""

    version: str | None = None

    def __init__(self, domains: Sequence[str]) -> None:
        self.domains = list(domains)

    def predict(self, queries: Sequence[str]) -> np.ndarray:
        m = len(self.domains)
        return np.full((len(queries), m), 1.0 / max(m, 1), dtype=np.float64)
