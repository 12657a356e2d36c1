"""``fedqa index prune``: remove old index versions and the leftovers of killed builds.

Kept: the ``keep`` newest complete versions, the active one, the ones a queued or running evaluation job is
pinned to, the ones a process holds open (the embedded store opens a version in one process at a time, so
a version a running ``fedqa serve`` still answers from is seen as busy), the ones a process on a shared Qdrant
store serves (any replica, any home: its lease has not lapsed, :mod:`service.retrieval.client_leases`), and builds
whose process still runs (it holds the build lock, :meth:`service.artifacts.Registry.building`). A version folder
without a manifest and without a live build is a leftover: its collections and files are removed.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.artifacts import MANIFEST, ArtifactError, Registry
from service.config import Settings
from service.retrieval.store import StoreBackend, StoreUnavailable

log = logging.getLogger("fedqa.indexes")


@dataclass
class PruneReport:
    """What a prune removed and why it kept the rest."""

    removed: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # version -> why


def pinned_versions(settings: Settings) -> set[str]:
    """Index versions queued or running evaluation jobs are pinned to (none when there is no jobs database)."""
    if not settings.jobs_path.is_file():
        return set()
    from service.evaluation.jobs import JobStore

    store = JobStore.for_settings(settings)
    pinned = set()
    for job_id in store.unfinished():
        index = (store.versions(job_id) or {}).get("index")
        if isinstance(index, str):
            pinned.add(index)
    return pinned


def leased_versions(backend: StoreBackend, now: float) -> dict[str, str]:
    """The versions a lease fresh at ``now`` holds, each with who holds it (``serving lease of <command> at <holder>``)."""
    holders: dict[str, list[str]] = {}
    for lease in backend.leases():
        if lease.fresh(now):
            holders.setdefault(lease.version, []).append(f"{lease.why} at {lease.holder}")
    return {version: "serving lease of " + ", ".join(sorted(who)) for version, who in holders.items()}


def _busy(backend: StoreBackend, version: str) -> bool:
    """Whether another process holds the version open (only the embedded store can tell)."""
    if backend.name != "qdrant-edge":
        return False
    try:
        backend.open(version).close()
    except StoreUnavailable as exc:
        return "another process" in str(exc)
    return False


def prune_indexes(
    settings: Settings, keep: int, *, backend: StoreBackend | None = None, dry_run: bool = False, now: float | None = None
) -> PruneReport:
    """Remove every index version but the ``keep`` newest and those in use (module docstring), and build leftovers.
    ``now`` (epoch seconds, default the clock's): the time leases are judged fresh at."""
    if keep < 0:
        raise ValueError(f"--keep must be 0 or more, not {keep}")
    from service.retrieval.backends import open_backend

    registry = Registry(settings.home_dir)
    backend = backend or open_backend(settings)
    report = PruneReport()
    complete = [v.version for v in registry.list("index")]  # oldest first
    why = dict.fromkeys(complete[len(complete) - keep :] if keep else [], "newest")
    why.update(dict.fromkeys(pinned_versions(settings) & set(complete), "pinned by an evaluation job"))
    why.update(leased_versions(backend, time.time() if now is None else now))
    active = registry.active()["index"]
    if active:
        why[active] = "active"
    for folder in _version_folders(registry):
        version = folder.name
        leftover = not (folder / MANIFEST).is_file()
        if version in why:
            report.kept[version] = why[version]
        elif leftover and registry.build_running("index", version):
            report.kept[version] = "build running"
        elif not leftover and _busy(backend, version):
            report.kept[version] = "open in another process"
        else:
            (report.leftovers if leftover else report.removed).append(version)
            if not dry_run:
                _remove(registry, backend, version)
    return report


def _version_folders(registry: Registry) -> list[Path]:
    """The index folders whose names are version names inside the home (anything else is left alone)."""
    root = registry.kind_dir("index")
    out = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            registry.path("index", folder.name)
        except ArtifactError:
            continue
        if folder.is_dir():
            out.append(folder)
    return out


def _remove(registry: Registry, backend: StoreBackend, version: str) -> None:
    """Drop a version's collections, then its folder (the manifest first, so a half-removed version is never
    listed) and its build lock file."""
    log.info("removing index version %s", version)
    (registry.path("index", version) / MANIFEST).unlink(missing_ok=True)
    backend.drop(version)
    shutil.rmtree(registry.path("index", version), ignore_errors=True)
    Path(registry.build_lock("index", version).lock_file).unlink(missing_ok=True)
