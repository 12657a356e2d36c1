"""A bundle of versions is activated in one write of ``active.json``: all of it or none, each replaced version kept
for rollback."""

from __future__ import annotations

import json

import pytest

from service.artifacts import ArtifactError, Bundle, Registry


def _version(registry: Registry, kind, name_hint: str = "") -> str:  # noqa: ANN001
    version = registry.new_version(kind)
    registry.complete(kind, version, {"hint": name_hint})
    return version


def test_activate_many_switches_every_named_kind_at_once_and_keeps_history(tmp_path):
    registry = Registry(tmp_path)
    index, router = _version(registry, "index"), _version(registry, "router")
    registry.activate_many(Bundle(index=index, router=router))
    index2, router2 = _version(registry, "index"), _version(registry, "router")
    changed = registry.activate_many(Bundle(index=index2, router=router2))
    assert changed == ["index", "router"]
    assert registry.bundle() == Bundle(index=index2, router=router2)
    assert registry.rollback("router") == router and registry.rollback("index") == index


def test_activate_many_with_an_incomplete_version_changes_nothing(tmp_path):
    registry = Registry(tmp_path)
    index, router = _version(registry, "index"), _version(registry, "router")
    registry.activate_many(Bundle(index=index, router=router))
    before = (tmp_path / "active.json").read_text(encoding="utf-8")
    half = registry.new_version("router")  # no manifest: a killed build
    with pytest.raises(ArtifactError):
        registry.activate_many(Bundle(index=_version(registry, "index"), router=half))
    assert (tmp_path / "active.json").read_text(encoding="utf-8") == before


def test_activate_many_leaves_unnamed_kinds_and_reports_no_change(tmp_path):
    registry = Registry(tmp_path)
    index, reranker = _version(registry, "index"), _version(registry, "reranker")
    registry.activate_many(Bundle(index=index, reranker=reranker))
    assert registry.activate_many(Bundle(index=index)) == []
    state = json.loads((tmp_path / "active.json").read_text(encoding="utf-8"))
    assert state["reranker"] == reranker and state["history"].get("index", []) == []


def test_activate_many_refuses_when_the_active_versions_moved_since_the_fit_started(tmp_path):
    registry = Registry(tmp_path)
    registry.activate_many(Bundle(index=_version(registry, "index")))
    start = registry.bundle()
    registry.activate("index", moved := _version(registry, "index"))  # e.g. an ingest while a refresh ran
    with pytest.raises(ArtifactError, match="changed while this ran"):
        registry.activate_many(Bundle(router=_version(registry, "router")), expect=start)
    assert registry.bundle() == Bundle(index=moved)
