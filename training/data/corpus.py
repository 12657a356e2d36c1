"""The corpus to make training data from: exchange-format JSONL, page folders, or the active index."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from service.artifacts import Registry
from service.config import Settings
from service.retrieval.passage import Passage


def load_corpus(paths: Sequence[Path], settings: Settings, *, domain: str | None = None) -> list[Passage]:
    """Passages of ``paths`` segmented exactly as ``fedqa ingest`` does (same tokenizer, same limits)."""
    from indexes.build import dedupe
    from indexes.loaders import load_paths, segmentation_for

    def counter() -> Callable[[str], int]:  # built only when a folder of pages needs it
        from service.retrieval.encoder import packaged_minilm_path
        from service.retrieval.tokens import EncoderTokenizer

        path = Path(settings.encoder_model or packaged_minilm_path())
        return EncoderTokenizer.load(path, max_length=settings.max_passage_tokens).count

    needs_tokens = any(Path(p).is_dir() or Path(p).suffix.lower() != ".jsonl" for p in paths)
    count = counter() if needs_tokens else (lambda text: 0)
    passages, _ = dedupe(load_paths([Path(p) for p in paths], domain=domain, segmentation=segmentation_for(settings, count)))
    return passages


def index_corpus(settings: Settings, version: str | None = None) -> list[Passage]:
    """Every passage of an index version (default: the active one) of the data home.

    Works while a service holds the version open (the embedded store is then read from a copy).
    """
    from indexes.rebuild import read_index
    from service.retrieval.backends import open_backend
    from service.retrieval.store import StoreUnavailable

    registry = Registry(settings.home_dir)
    version = version or registry.active()["index"]
    if not version:
        raise StoreUnavailable(f"no index in {settings.home_dir}: ingest documents first (fedqa ingest PATH)")
    registry.manifest("index", version)  # raises unless complete
    return read_index(open_backend(settings), registry, version)
