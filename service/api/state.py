"""The service's heavy objects, created once and swapped atomically on reload.

A pipeline loaded here serves the home's trusted feedback as known answers (:func:`~service.loading.learn_feedback`).

Every user of the pipeline (a request, a streamed answer, an evaluation job) holds a lease on it
(:meth:`ServiceState.lease`). A reload swaps in the new pipeline at once, and the old one is closed
(its search threads, and its store unless a live pipeline shares it) only when its last lease is
given back, so nothing in flight loses its pipeline halfway.

Every load uses one store backend, opened at the first load (unless one was given) and closed when the
state is closed and its last pipeline is released: with a Qdrant server that backend holds the
QdrantClient (its connection pool), so reloads that change the index version do not each open one more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from service.config import Settings
from service.loading import learn_feedback, load_pipeline
from service.pipeline import Pipeline
from service.retrieval.backends import open_backend
from service.retrieval.store import StoreBackend

log = logging.getLogger("fedqa.api")


class Lease:
    """One user's hold on a pipeline; :meth:`release` gives it back (once, however often it is called)."""

    def __init__(self, state: ServiceState, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self._state = state
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._state._give_back(self.pipeline)


class ServiceState:
    """Holds the current pipeline; users take a lease on it, reload swaps it."""

    def __init__(self, settings: Settings, backend: StoreBackend | None = None, loader: Callable[..., Pipeline] = load_pipeline) -> None:
        self.settings = settings
        self.backend = backend
        self._owns_backend = False  # opened here (closed here), not given
        self._closed = False
        self._loader = loader
        self._lock = threading.Lock()  # one load at a time
        self._users_lock = threading.Lock()  # leases and retirement (never held while loading)
        self._users: dict[int, int] = {}
        self._retired: dict[int, Pipeline] = {}
        self.pipeline: Pipeline | None = None
        self.error: str | None = None

    # ----------------------------------------------------------------- leases
    def acquire(self) -> Lease | None:
        """A lease on the current pipeline (None when none is loaded); give it back with ``release()``."""
        with self._users_lock:
            p = self.pipeline
            if p is None:
                return None
            self._users[id(p)] = self._users.get(id(p), 0) + 1
            return Lease(self, p)

    @contextmanager
    def lease(self) -> Iterator[Pipeline | None]:
        """The current pipeline for the duration of a ``with`` block (None when none is loaded)."""
        held = self.acquire()
        try:
            yield held.pipeline if held else None
        finally:
            if held:
                held.release()

    def in_use(self, pipeline: Pipeline) -> int:
        """How many leases a pipeline has outstanding."""
        with self._users_lock:
            return self._users.get(id(pipeline), 0)

    def _give_back(self, pipeline: Pipeline) -> None:
        with self._users_lock:
            n = self._users.get(id(pipeline), 0) - 1
            if n > 0:
                self._users[id(pipeline)] = n
                return
            self._users.pop(id(pipeline), None)
            if self._retired.pop(id(pipeline), None) is None:
                return  # still the current pipeline
            close_store = self._store_unshared(pipeline)
        self._close(pipeline, close_store)
        self._close_backend_when_done()

    def _store_unshared(self, pipeline: Pipeline) -> bool:
        """True when no other live pipeline (current or retired with users) uses this pipeline's store."""
        others = [self.pipeline, *self._retired.values()]
        return not any(o is not None and o is not pipeline and o.store is pipeline.store for o in others)

    def _retire(self, old: Pipeline) -> None:
        """Close ``old`` now when nobody uses it, else when its last lease is given back."""
        with self._users_lock:
            if self._users.get(id(old), 0) > 0:
                self._retired[id(old)] = old
                log.info("previous pipeline closes when its %d user(s) are done", self._users[id(old)])
                return
            close_store = self._store_unshared(old)
        self._close(old, close_store)

    @staticmethod
    def _close(pipeline: Pipeline, close_store: bool) -> None:
        try:
            pipeline.close(close_store=close_store)
        except Exception:  # noqa: BLE001 - closing must not fail the last request that used it
            log.exception("closing the previous pipeline failed")

    # ------------------------------------------------------------------ loads
    def load(self) -> None:
        """(Re)build the pipeline from the active versions; on failure the old one keeps serving.

        When the active index version is the one already open, its store is handed to the new
        pipeline rather than opened a second time. The old pipeline is retired (see the module doc).
        """
        with self._lock:
            current = self.pipeline
            self._closed = False
            try:
                if self.backend is None:
                    self.backend, self._owns_backend = open_backend(self.settings), True
                if current is not None:
                    fresh = self._loader(self.settings, self.backend, store=current.store)
                else:
                    fresh = self._loader(self.settings, self.backend)
                learn_feedback(fresh, self.settings)
            except Exception as exc:
                self.error = str(exc)
                log.error("pipeline not loaded: %s", exc)
                if self.pipeline is None:
                    return
                raise
            with self._users_lock:
                old, self.pipeline, self.error = self.pipeline, fresh, None
            if old is not None and old is not fresh:
                self._retire(old)
        learn_feedback(fresh, self.settings)  # feedback stored while it loaded (a request that leased the old pipeline)

    def close(self) -> None:
        """Release the pipeline's resources (at shutdown; leases still out keep theirs until given back)."""
        with self._users_lock:
            old, self.pipeline = self.pipeline, None
            self._closed = True
        if old is not None:
            self._retire(old)
        self._close_backend_when_done()

    def _close_backend_when_done(self) -> None:
        """Close the backend this state opened once the state is closed and no pipeline uses it any more."""
        with self._users_lock:
            if not (self._closed and self._owns_backend and self.backend is not None and not self._retired):
                return
            backend, self.backend, self._owns_backend = self.backend, None, False
        # qdrant-client's backend holds QdrantClients and this process's leases; the embedded one holds nothing to close.
        close = getattr(backend, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - shutting down
                log.exception("closing the store backend failed")
