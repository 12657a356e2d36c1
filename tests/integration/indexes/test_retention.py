"""The data home's versions: names that stay inside it, active.json under a lock, and ``fedqa index prune``."""

from __future__ import annotations

import json
import threading

import pytest

from indexes.ingest import ingest
from service.artifacts import ArtifactError, Registry
from service.cli import main
from service.config import get_settings
from service.evaluation.jobs import JobStore
from service.evaluation.spec import JobQuestion, JobSpec
from service.retrieval.strategies import StrategyName
from tests.conftest import make_settings
from tests.utils import present


@pytest.fixture
def cli_home(tmp_path, monkeypatch):
    """FEDQA_HOME for in-process ``fedqa`` commands."""
    monkeypatch.setenv("FEDQA_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


def _complete(reg: Registry, kind, version: str | None = None) -> str:
    version = version or reg.new_version(kind)
    if not reg.path(kind, version).is_dir():
        reg.path(kind, version).mkdir(parents=True)
    reg.complete(kind, version, {"domains": {}})
    return version


def test_activate_refuses_a_version_that_resolves_outside_the_home(tmp_path, cli_home, capsys):
    reg = Registry(cli_home)
    inside = _complete(reg, "index")
    reg.activate("index", inside)
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "manifest.json").write_text(json.dumps({"kind": "index", "version": "evil"}), encoding="utf-8")
    (reg.kind_dir("index") / "index-link").symlink_to(evil, target_is_directory=True)
    for name in (f"{inside}/../../../evil", "index-link", "index-/tmp/x"):
        assert main(["models", "activate", name]) == 2, name
        assert "version" in capsys.readouterr().err
    assert reg.active()["index"] == inside
    with pytest.raises(ArtifactError):
        reg.manifest("index", "..")


def test_two_activations_at_once_both_take_effect(tmp_path, monkeypatch):
    reg = Registry(tmp_path / "home")
    index, router = _complete(reg, "index"), _complete(reg, "router")
    read = Registry._state
    reads, both_read = [], threading.Event()

    def slow_read(self):  # widen the read-modify-write window: without a lock one update is lost
        state = read(self)
        reads.append(state)
        if len(reads) >= 2:
            both_read.set()
        # Without the lock both activations read before either writes (one update lost, every time); with it the
        # second reads only after the first wrote, so the first goes on at this bound.
        both_read.wait(0.5)
        return state

    monkeypatch.setattr(Registry, "_state", slow_read)
    threads = [threading.Thread(target=reg.activate, args=a) for a in (("index", index), ("router", router))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.setattr(Registry, "_state", read)
    assert reg.active()["index"] == index and reg.active()["router"] == router


def test_prune_keeps_the_newest_the_active_the_pinned_and_running_builds(tmp_path, encoder, cli_home, capsys):
    settings = make_settings(cli_home)
    reg = Registry(cli_home)
    docs = tmp_path / "docs.jsonl"
    versions = []
    for i in range(4):
        docs.write_text(json.dumps({"doc_id": "a#0", "domain": "orbit", "text": f"Release {i} ships in spring."}) + "\n", encoding="utf-8")
        versions.append(present(ingest([docs], settings, encoder=encoder, progress=False).version))
    reg.activate("index", versions[1])  # a rollback: the active version is not the newest
    JobStore.for_settings(settings).create(JobSpec(strategies=[StrategyName.UIS]), [JobQuestion(qid="q", query="x")], versions={"index": versions[0]})
    killed = reg.new_version("index")  # a build killed before its manifest: no lock held
    (reg.path("index", killed) / "shards").mkdir()
    with reg.building("index") as running:  # a build in progress (its lock is held)
        assert main(["index", "prune", "--keep", "1"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert reg.path("index", running).is_dir()
    assert out["removed"] == [versions[2]] and out["leftovers_removed"] == [killed]
    assert out["kept"] == {versions[0]: "pinned by an evaluation job", versions[1]: "active", versions[3]: "newest", running: "build running"}
    assert [v.version for v in reg.list("index")] == [versions[0], versions[1], versions[3]]
    # the build that was running is left as it was (its own code completes or removes it; prune never touches it)
    assert sorted(p.name for p in reg.kind_dir("index").iterdir()) == sorted([versions[0], versions[1], versions[3], running])
    assert reg.active()["index"] == versions[1]
    # --keep 0 leaves the active version (and the pinned one) alone.
    assert main(["index", "prune", "--keep", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [versions[3]]
    assert [v.version for v in reg.list("index")] == [versions[0], versions[1]]
