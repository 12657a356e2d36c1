"""The router: p_j = sigmoid(head(v)_j / T + b_j), one independent probability per domain.

``v`` is the retriever's own query vector (service/retrieval/encoder.py), so one encoder forward per
question gives both the router's probabilities and the vector searched with. The head is a small
MLP (or linear layer) trained with binary cross-entropy per domain (training/router.py); ``T`` and
``b`` are a temperature and per-domain biases fitted on held-out questions (training/calibration.py),
which give back the products' prior odds that domain-balanced training removes. A router version records
the retriever version whose vectors it reads, and the fitted parameters of the strategies that use
it (``fitted``: calibration, fusion, ...; :class:`~service.routing.fitted.RouterFitted`), all in ``router.json``
beside ``head.safetensors``.

Router versions of earlier releases (a fine-tuned BERT classifier, ``config.json`` + weights, no
``router.json``) are refused with :class:`RouterFormatError`; the pipeline then searches every
domain and says to retrain (``fedqa train router``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from scipy.special import expit
from torch import nn

from service.routing.fitted import RouterFitted

ROUTER_FILE = "router.json"
HEAD_FILE = "head.safetensors"
FORMAT = "embedding-head-v1"


class RouterFormatError(RuntimeError):
    """A router version this release cannot use (an older BERT router, or a different format)."""


class Router(Protocol):
    """Gives p_j = P(domain j | query) for each of its domains, from the retriever's query vectors."""

    domains: list[str]
    version: str | None
    retriever: str | None  # the retriever version whose vectors it reads (None: any)
    fitted: RouterFitted  # parameters fitted with this router (calibration, fusion, ...)

    def predict_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """Probabilities, shape (n, len(domains)), each in [0, 1], independent (not a softmax)."""
        ...


def head_module(dim: int, n_domains: int, hidden: int) -> nn.Module:
    """The classifier over a query vector: linear when ``hidden`` is 0, else one hidden ReLU layer."""
    if hidden <= 0:
        return nn.Linear(dim, n_domains)
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, n_domains))


class HeadRouter:
    """Multi-label head over query vectors: p_j = sigmoid(z_j / temperature + bias_j) (1 and 0: uncalibrated).

    ``module`` is a :func:`head_module` (linear layers with ReLU between them).
    """

    def __init__(
        self,
        module: nn.Module,
        domains: Sequence[str],
        *,
        dim: int,
        hidden: int,
        retriever: str | None,
        temperature: float = 1.0,
        bias: Sequence[float] | None = None,
        fitted: RouterFitted | None = None,
        version: str | None = None,
    ) -> None:
        if not domains:
            raise ValueError("a router needs at least one domain")
        self.module = module
        self.domains = list(domains)
        self.dim = dim
        self.hidden = hidden
        self.retriever = retriever
        self.temperature = float(temperature)
        self.bias = [float(b) for b in bias] if bias else []
        if self.bias and len(self.bias) != len(self.domains):
            raise ValueError(f"{len(self.bias)} biases for {len(self.domains)} domains")
        self.fitted = fitted if fitted is not None else RouterFitted()
        self.version = version
        self._layers_key: tuple[int, ...] | None = None
        self._layers_np: list[tuple[np.ndarray, np.ndarray]] = []

    @classmethod
    def new(cls, domains: Sequence[str], dim: int, *, hidden: int = 256, retriever: str | None = None) -> HeadRouter:
        """An untrained head (for training)."""
        return cls(head_module(dim, len(domains), hidden), domains, dim=dim, hidden=hidden, retriever=retriever)

    def logits(self, vectors: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Raw logits (before the temperature), with gradients when the module is training."""
        x = torch.as_tensor(np.asarray(vectors, dtype=np.float32)) if not isinstance(vectors, torch.Tensor) else vectors
        return self.module(x)

    def raw_logits(self, vectors: np.ndarray) -> np.ndarray:
        """Logits as numpy, as in inference mode (no dropout), before the temperature.

        Computed with numpy from the head's weights: for one query vector, PyTorch's per-call
        overhead cost ten times the arithmetic (0.3 ms against 0.03 ms on the request path).
        """
        x = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        layers = self._layers()
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = np.maximum(x, 0.0)  # the hidden layer's ReLU (see head_module)
        return x.astype(np.float64)

    def _layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The head's linear layers as numpy (weight transposed, bias), copied again whenever training changed a
        parameter (a tensor's version counter grows with every in-place update)."""
        params = list(self.module.parameters())
        key = tuple(p._version for p in params) + tuple(id(p) for p in params)
        if self._layers_key != key:
            linears = [m for m in self.module.modules() if isinstance(m, nn.Linear)]
            self._layers_np = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in linears]
            self._layers_key = key
        return self._layers_np

    def predict_vectors(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        if vectors.shape[0] == 0:
            return np.zeros((0, len(self.domains)), dtype=np.float64)
        z = self.raw_logits(vectors) / self.temperature
        if self.bias:
            z = z + np.asarray(self.bias, dtype=np.float64)
        return expit(z)

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path) -> None:
        """Write ``head.safetensors`` and ``router.json`` (domains, retriever, temperature, bias, fitted)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.module.state_dict().items()}, str(path / HEAD_FILE))
        meta = {
            "format": FORMAT,
            "domains": self.domains,
            "dim": self.dim,
            "hidden": self.hidden,
            "retriever": self.retriever,
            "temperature": self.temperature,
            "bias": self.bias,
            "fitted": self.fitted.to_json(),
        }
        (path / ROUTER_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, version: str | None = None) -> HeadRouter:
        """Load a router saved with :meth:`save`; RouterFormatError for an older BERT router."""
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / ROUTER_FILE).is_file():
            if (path / "config.json").is_file():
                raise RouterFormatError(
                    f"router version {version or path.name} is a BERT router of an earlier fedqa release; "
                    "this release routes with a head over the retriever's query vectors: retrain it "
                    "(fedqa train router --data DIR)"
                )
            raise FileNotFoundError(f"no trained router at {path} (missing {ROUTER_FILE})")
        meta = json.loads((path / ROUTER_FILE).read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise RouterFormatError(f"router {path} has format {meta.get('format')!r}; this release reads {FORMAT!r}")
        if not (path / HEAD_FILE).is_file():
            raise FileNotFoundError(f"router model weights missing: {path / HEAD_FILE}")
        try:
            fitted = RouterFitted.from_json(meta.get("fitted"))
        except ValueError as exc:
            raise RouterFormatError(f"router {path}: {exc}; retrain it (fedqa train router --data DIR)") from exc
        module = head_module(int(meta["dim"]), len(meta["domains"]), int(meta["hidden"]))
        module.load_state_dict(load_file(str(path / HEAD_FILE)))
        module.eval()
        return cls(
            module,
            meta["domains"],
            dim=int(meta["dim"]),
            hidden=int(meta["hidden"]),
            retriever=meta.get("retriever"),
            temperature=float(meta.get("temperature", 1.0)),
            bias=meta.get("bias") or None,
            fitted=fitted,
            version=version,
        )


class UniformRouter:
    """Stand-in when no router is trained yet: every domain equally likely, so every domain is searched."""

    def __init__(self, domains: Sequence[str]) -> None:
        self.domains = list(domains)
        self.version: str | None = None
        self.retriever: str | None = None
        self.fitted = RouterFitted()

    def predict_vectors(self, vectors: np.ndarray) -> np.ndarray:
        m = len(self.domains)
        n = np.asarray(vectors).reshape(-1, np.asarray(vectors).shape[-1]).shape[0] if np.asarray(vectors).size else 0
        return np.full((n, m), 1.0 / max(m, 1), dtype=np.float64)
