"""Sentence vectors of a small index embedded in the background at start-up, so that extractive answers
embed nothing at request time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.generation.extractive import Extractor
    from service.retrieval.store import Store

log = logging.getLogger("fedqa.pipeline")


def warm_sentences(extractor: Extractor, store: Store, domains: Sequence[str], limit: int, stop: threading.Event) -> threading.Thread | None:
    """Start embedding every passage's sentences in a daemon thread when the index has at most ``limit`` passages
    (FEDQA_SENTENCE_VECTORS_PRECOMPUTE) and answers embed sentences at all; the thread, or None when nothing
    is to be done. It stops at its next batch once ``stop`` is set."""
    vectors = extractor.vectors
    if vectors is None or not extractor.embeds_sentences or limit <= 0 or vectors.filling:
        return None
    try:
        total = sum(store.count(d) for d in domains)
    except Exception:  # noqa: BLE001 - a store without counts is simply not pre-warmed
        return None
    if total > min(limit, vectors.capacity):
        return None
    vectors.filling = True

    def run() -> None:
        try:
            passages = [p for d in domains for p in store.iter_passages(d)]
            vectors.fill(passages, stop=stop.is_set)
        except Exception as exc:  # noqa: BLE001 - the answers then embed at request time
            log.warning("sentence vectors not pre-computed: %s", exc)

    thread = threading.Thread(target=run, name="fedqa-sentence-vectors", daemon=True)
    thread.start()
    return thread
