"""Versioned artifacts (indexes, routers, retrievers, rerankers) in the data home, and the active set.

Layout::

    $FEDQA_HOME/active.json             {"index": v, "router": v, "retriever": v, "history": {...}}
    $FEDQA_HOME/{indexes,routers,retrievers,rerankers}/<version>/   the artifact; manifest.json is written last

A version is usable only once its ``manifest.json`` exists (written atomically after the
artifact is complete), so a crashed or interrupted build is never activated. Switching
versions is one atomic ``os.replace`` of ``active.json``, read, changed and written under a file
lock (``active.json.lock``), so two commands switching versions at once both take effect.
A version name is one plain path component: a name that would resolve outside the home is refused.
A build in progress holds ``<kind folder>/.<version>.lock`` (:meth:`Registry.building`), so
``fedqa index prune`` tells a killed build's leftovers from a running one.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from filelock import FileLock, Timeout
from pydantic import TypeAdapter, ValidationError

Kind = Literal["index", "router", "retriever", "reranker"]
KINDS: tuple[Kind, ...] = ("index", "router", "retriever", "reranker")
_FOLDERS: dict[str, str] = {"index": "indexes", "router": "routers", "retriever": "retrievers", "reranker": "rerankers"}
MANIFEST = "manifest.json"
_VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class ArtifactError(RuntimeError):
    """A version is missing, incomplete or of the wrong kind."""


_Fitted = TypeVar("_Fitted")


def load_fitted(path: Path | None, from_json: Callable[[dict[str, Any], str], _Fitted]) -> _Fitted | None:
    """A decision fitted beside a version (``from_json(data, "<version>/<file>")``), or None when ``path`` is None
    or nothing was fitted there."""
    if path is None or not path.is_file():
        return None
    return from_json(json.loads(path.read_text(encoding="utf-8")), f"{path.parent.name}/{path.name}")


def read_stored(adapter: TypeAdapter[_Fitted], data: Any, name: str) -> _Fitted:
    """The stored form ``data`` read (validated) by ``adapter``; ValueError naming ``name`` (its file) and each field
    that is missing or invalid."""
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'object'}: {e['msg']}" for e in exc.errors(include_url=False))
        raise ValueError(f"{name}: incomplete or invalid ({problems})") from exc


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Bundle:
    """One version of every kind that serves together (None: none of that kind), e.g. ``active.json``'s, or the
    versions a refresh fits against before it activates them (:meth:`Registry.activate_many`)."""

    index: str | None = None
    router: str | None = None
    retriever: str | None = None
    reranker: str | None = None

    def get(self, kind: Kind) -> str | None:
        """The version of ``kind``."""
        return getattr(self, kind)

    def with_version(self, kind: Kind, version: str | None) -> Bundle:
        """This bundle with ``kind`` set to ``version``."""
        return replace(self, **{kind: version})

    def as_dict(self) -> dict[str, str | None]:
        """Kind -> version."""
        return asdict(self)


@dataclass(frozen=True)
class VersionInfo:
    """One stored version and its manifest."""

    kind: Kind
    version: str
    path: Path
    manifest: dict[str, Any]
    active: bool


class Registry:
    """Reads and switches the versions stored under one data home."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home).expanduser()

    # paths -----------------------------------------------------------------
    def kind_dir(self, kind: Kind) -> Path:
        """Folder holding every version of ``kind``."""
        return self.home / _FOLDERS[kind]

    def path(self, kind: Kind, version: str) -> Path:
        """Folder of one version; ArtifactError for a name that is not one plain path component inside the home."""
        if not isinstance(version, str) or not _VERSION_NAME.fullmatch(version):
            raise ArtifactError(f"{version!r} is not a version name (letters, digits, '.', '_', '-'; no path)")
        path = self.kind_dir(kind) / version
        if path.exists() and not path.resolve().is_relative_to(self.kind_dir(kind).resolve()):
            raise ArtifactError(f"{kind} version {version!r} resolves outside {self.kind_dir(kind)}")
        return path

    def build_lock(self, kind: Kind, version: str) -> FileLock:
        """The lock a build of ``version`` holds while it runs (beside the version's folder, not in it)."""
        self.path(kind, version)  # validates the name
        return FileLock(self.kind_dir(kind) / f".{version}.lock")

    @contextmanager
    def building(self, kind: Kind) -> Iterator[str]:
        """A new version (:meth:`new_version`) whose build lock is held until the block ends (then removed)."""
        self.kind_dir(kind).mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            name = self._version_name(kind)
            lock = self.build_lock(kind, name)
            lock.acquire()
            try:
                self.path(kind, name).mkdir(exist_ok=False)
            except FileExistsError:
                lock.release()
                continue
            try:
                yield name
            finally:
                lock.release()
                Path(lock.lock_file).unlink(missing_ok=True)
            return
        raise ArtifactError(f"could not name a new {kind} version")

    def build_running(self, kind: Kind, version: str) -> bool:
        """Whether a live process holds ``version``'s build lock (a build without one was killed, or never took one)."""
        lock = self.build_lock(kind, version)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
        return False

    # versions --------------------------------------------------------------
    @staticmethod
    def _version_name(kind: Kind) -> str:
        """``<kind>-<UTC date>-<time to the millisecond>-<random>``: sorted by name, versions are in creation order
        (``fedqa index prune`` keeps the newest by it), also several in one second."""
        now = time.time()
        return f"{kind}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}{int(now * 1000) % 1000:03d}-{secrets.token_hex(2)}"

    def new_version(self, kind: Kind) -> str:
        """A fresh, sortable version name; its folder is created empty."""
        name = self._version_name(kind)
        self.path(kind, name).mkdir(parents=True, exist_ok=False)
        return name

    def complete(self, kind: Kind, version: str, manifest: dict[str, Any]) -> None:
        """Mark a version complete by writing its manifest (last step of any build)."""
        data = {"kind": kind, "version": version, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **manifest}
        write_json_atomic(self.path(kind, version) / MANIFEST, data)

    def manifest(self, kind: Kind, version: str) -> dict[str, Any]:
        """The manifest of a complete version; ArtifactError if it is incomplete or absent."""
        f = self.path(kind, version) / MANIFEST
        if not f.is_file():
            raise ArtifactError(f"{kind} version {version!r} does not exist or is incomplete")
        return json.loads(f.read_text(encoding="utf-8"))

    def list(self, kind: Kind) -> list[VersionInfo]:
        """Complete versions of ``kind``, oldest first."""
        d = self.kind_dir(kind)
        if not d.is_dir():
            return []
        active = self.active().get(kind)
        out = []
        for p in sorted(d.iterdir()):
            if _VERSION_NAME.fullmatch(p.name) and p.resolve().is_relative_to(d.resolve()) and (p / MANIFEST).is_file():
                out.append(VersionInfo(kind, p.name, p, json.loads((p / MANIFEST).read_text("utf-8")), p.name == active))
        return out

    # active set ------------------------------------------------------------
    def _state_lock(self) -> FileLock:
        """Held while ``active.json`` is read, changed and written (readers need none: it is replaced atomically)."""
        self.home.mkdir(parents=True, exist_ok=True)
        return FileLock(self.home / "active.json.lock")

    def _state(self) -> dict[str, Any]:
        f = self.home / "active.json"
        if not f.is_file():
            return {"history": {}}
        return json.loads(f.read_text(encoding="utf-8"))

    def active(self) -> dict[str, str | None]:
        """The active version of every kind (None where there is none)."""
        state = self._state()
        return {k: state.get(k) for k in KINDS}

    def bundle(self) -> Bundle:
        """The active versions as one :class:`Bundle`."""
        return Bundle(**self.active())

    def active_manifest(self, kind: Kind) -> dict[str, Any] | None:
        """Manifest of the active version of ``kind``, or None."""
        v = self.active()[kind]
        return self.manifest(kind, v) if v else None

    def activate(self, kind: Kind, version: str) -> None:
        """Make a complete version the active one, atomically; the previous one goes to history."""
        self.activate_many(Bundle().with_version(kind, version))

    def activate_many(self, bundle: Bundle, *, expect: Bundle | None = None) -> builtins.list[Kind]:
        """Make every version ``bundle`` names (its None kinds are left as they are) active in one atomic write of
        ``active.json``: a reader sees the previous set or the new one, never a mix. Each replaced version goes to its
        kind's history (``fedqa models rollback``). Returns the kinds that changed; ArtifactError (nothing changed)
        when a named version is incomplete, or when the active versions are no longer ``expect`` (the ones a fit
        started from: another command switched versions meanwhile)."""
        named = {k: v for k in KINDS if (v := bundle.get(k)) is not None}
        for kind, version in named.items():
            self.manifest(kind, version)  # raises unless complete
        with self._state_lock():
            state = self._state()
            if expect is not None and (now := Bundle(**{k: state.get(k) for k in KINDS})) != expect:
                moved = ", ".join(f"{k} {expect.get(k)} -> {now.get(k)}" for k in KINDS if now.get(k) != expect.get(k))
                raise ArtifactError(f"the active versions changed while this ran ({moved}): nothing was activated; run it again")
            changed: list[Kind] = []
            for kind, version in named.items():
                previous = state.get(kind)
                if previous == version:
                    continue
                if previous:
                    state.setdefault("history", {}).setdefault(kind, []).append(previous)
                state[kind] = version
                changed.append(kind)
            if changed:
                write_json_atomic(self.home / "active.json", state)
            return changed

    def rollback(self, kind: Kind) -> str:
        """Re-activate the previously active version of ``kind`` and return it."""
        with self._state_lock():
            state = self._state()
            history: list[str] = state.get("history", {}).get(kind, [])
            while history:
                candidate = history.pop()
                if (self.path(kind, candidate) / MANIFEST).is_file():
                    state[kind] = candidate
                    write_json_atomic(self.home / "active.json", state)
                    return candidate
        raise ArtifactError(f"no earlier {kind} version to roll back to")


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def require_model_files(path: Path, what: str, *, tokenizer: bool = True) -> None:
    """FileNotFoundError naming the missing file when a model folder lacks its config, weights or tokenizer.

    Checked before loading, so a broken deployment says which file is missing instead of a
    library's generic error (and the service reports it on /readyz).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{what} model folder not found: {path}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{what} model file missing: {path / 'config.json'}")
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        raise FileNotFoundError(f"{what} model weights missing: {path / WEIGHT_FILES[0]} (or {WEIGHT_FILES[1]})")
    if tokenizer and not any((path / f).is_file() for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json")):
        raise FileNotFoundError(f"{what} tokenizer missing: {path / 'tokenizer.json'}")
