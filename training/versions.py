"""Saving a trained model as a new, complete version (and activating it)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from service.artifacts import Kind, Registry

METRICS_FILE = "metrics.json"


def save_version(
    registry: Registry,
    kind: Kind,
    write_model: Callable[[Path], None],
    metrics: dict[str, Any],
    manifest: dict[str, Any],
    *,
    activate: bool,
) -> str:
    """Write a new ``kind`` version: the model, ``metrics.json`` beside it, then the manifest (with the metrics).

    A failure on the way removes the half-written folder; only a complete version is activated.
    """
    version = registry.new_version(kind)
    path = registry.path(kind, version)
    try:
        write_model(path)
        (path / METRICS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True), encoding="utf-8")
        registry.complete(kind, version, {**manifest, "metrics": metrics})
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    if activate:
        registry.activate(kind, version)
    return version


def fitted_on(versions: Mapping[str, Any], started: float) -> dict[str, Any]:
    """Which serving versions a model fitted beside a router (abstention, answer policy) was fitted on, and how long it took."""
    return {
        "router": versions.get("router"),
        "index": versions.get("index"),
        "retriever": versions.get("retriever"),
        "seconds": round(time.perf_counter() - started, 1),
    }


def beside_router(settings_home: Path, versions: Mapping[str, Any], path_of: Callable[..., Path | None]) -> Path | None:
    """Where a model fitted for the serving versions is stored: ``path_of(registry, router, index)`` (the router
    version's folder, or the index's when no router is trained)."""
    router = versions.get("router")
    return path_of(Registry(settings_home), None if router == "uniform" else router, versions.get("index"))


def save_beside_router(
    settings_home: Path, versions: Mapping[str, Any], path_of: Callable[..., Path | None], save: Callable[[Path], None]
) -> str | None:
    """Store a model fitted for the serving versions where :func:`beside_router` says (``save(path)``); its path,
    or None when there is no place (no router and no index)."""
    target = beside_router(settings_home, versions, path_of)
    if target is None:
        return None
    save(target)
    return str(target)


def report_in_metrics(registry: Registry, kind: Kind, version: str, key: str, report: Any) -> None:
    """Add a decision fitted after a version was saved (e.g. the router's split rule) to its ``metrics.json`` and
    its manifest's metrics, under ``key``."""
    from service.artifacts import MANIFEST, write_json_atomic

    path = registry.path(kind, version)
    metrics_file = path / METRICS_FILE
    metrics = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    metrics[key] = report
    write_json_atomic(metrics_file, metrics)
    manifest = registry.manifest(kind, version)
    manifest["metrics"] = {**(manifest.get("metrics") or {}), key: report}
    write_json_atomic(path / MANIFEST, manifest)
