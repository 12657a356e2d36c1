"""The service's heavy objects, created once and swapped atomically on reload."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.config import Settings
from service.pipeline import Pipeline, load_pipeline
from service.retrieval.store import StoreBackend

log = logging.getLogger("fedqa.api")


class ServiceState:
    """Holds the current pipeline; requests take a reference, reload swaps it."""

    def __init__(
        self, settings: Settings, backend: StoreBackend | None = None, loader: Callable[..., Pipeline] = load_pipeline
    ) -> None:
        self.settings = settings
        self.backend = backend
        self._loader = loader
        self._lock = threading.Lock()
        self.pipeline: Pipeline | None = None
        self.error: str | None = None

    def load(self) -> None:
        """(Re)build the pipeline from the active versions; on failure the old one keeps serving.

        When the active index version is the one already open, its store is handed to the new
        pipeline rather than opened a second time.
        """
        with self._lock:
            current = self.pipeline
            try:
                if current is not None:
                    fresh = self._loader(self.settings, self.backend, store=current.store)
                else:
                    fresh = self._loader(self.settings, self.backend)
            except Exception as exc:
                self.error = str(exc)
                log.error("pipeline not loaded: %s", exc)
                if self.pipeline is None:
                    return
                raise
            old, self.pipeline, self.error = self.pipeline, fresh, None
        if old is not None:
            old.close(close_store=old.store is not fresh.store)

    def close(self) -> None:
        """Release the pipeline's resources."""
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
