"""Retrained models reach the running service: index build, /admin/reload, versions, rollback, failures."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
from fastapi.testclient import TestClient

from indexes.rebuild import rebuild_index
from service.api.app import create_app
from service.api.state import ServiceState
from service.artifacts import ArtifactError, Registry
from service.cli import main
from service.queries import LabelledQuery
from service.retrieval.encoder import Encoder
from tests.conftest import make_settings

ADMIN = {"Authorization": "Bearer admin-secret"}


def _site(root):
    pages = {
        "orbit": "# Contacts\n\n## Import\n\nImport contacts from a CSV file under Contacts > Import.\n\n"
        "## Merge\n\nMerge duplicate contacts from the contact page.\n",
        "ledger": "# Refunds\n\n## Refund a payment\n\nOpen the invoice and click Refund to return money to the card.\n\n"
        "## Invoices\n\nInvoices are kept for seven years.\n",
    }
    for domain, text in pages.items():
        (root / domain).mkdir(parents=True)
        (root / domain / "page.md").write_text(text, encoding="utf-8")


class _FailingEncoder(Encoder):
    """The base encoder, failing (or interrupted) after the first batch of passages (only what a rebuild reads)."""

    def __init__(self, inner: Encoder, exc: BaseException) -> None:  # no super().__init__: nothing loaded
        self.inner, self.exc, self.calls = inner, exc, 0
        self.version, self.path = inner.version, inner.path

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_passages(self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False, bulk: bool = False) -> np.ndarray:
        self.calls += 1
        if self.calls > 1:
            raise self.exc
        return self.inner.embed_passages(texts, batch_size=batch_size, progress=progress, bulk=bulk)


@pytest.fixture()
def home(tmp_path, encoder, monkeypatch):
    """An ingested two-domain home with a trained router; the CLI reads the same home."""
    from indexes.ingest import ingest
    from training.router import train_and_activate

    _site(tmp_path / "site")
    settings = make_settings(tmp_path / "home", admin_key="admin-secret", min_passage_chars=0)  # a passage a section
    ingest([tmp_path / "site"], settings, encoder=encoder, progress=False)
    qs = [LabelledQuery(f"q{i}", q, [d]) for i, (q, d) in enumerate([("import contacts", "orbit"), ("refund a payment", "ledger")] * 3)]
    train_and_activate(settings, qs, epochs=1, progress=False)
    monkeypatch.setenv("FEDQA_HOME", str(settings.home_dir))
    monkeypatch.setenv("FEDQA_LLM_BACKEND", "none")
    monkeypatch.setenv("FEDQA_MIN_PASSAGE_CHARS", "0")
    from service.config import get_settings

    get_settings.cache_clear()
    yield settings
    get_settings.cache_clear()


def _cli(capsys, *argv) -> dict:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_train_build_reload_serves_new_versions_and_failures_keep_the_old_ones(home, encoder, capsys, tmp_path):
    registry = Registry(home.home_dir)
    first = registry.active()
    state = ServiceState(home)
    with TestClient(create_app(home, state)) as client:
        v0 = client.get("/domains").json()["versions"]
        assert v0["index"] == first["index"] and v0["router"] == first["router"] and v0["retriever"] == "base"

        # Admin routes need the admin key.
        assert client.post("/admin/reload").status_code == 401
        assert client.post("/admin/reload", headers={"Authorization": "Bearer nope"}).status_code == 403

        # Training data from the active index, then a retriever and a router from it.
        data = tmp_path / "data"
        queries = tmp_path / "q.jsonl"
        queries.write_text(
            "\n".join(
                json.dumps({"qid": f"q{i}", "query": q, "domains": [d], "gold_doc_ids": [g]})
                for i, (q, d, g) in enumerate(
                    [
                        ("import a csv", "orbit", "orbit/page#000"),
                        ("refund money", "ledger", "ledger/page#000"),
                        ("merge duplicates", "orbit", "orbit/page#001"),
                        ("how long are invoices kept", "ledger", "ledger/page#001"),
                    ]
                    * 2
                )
            ),
            encoding="utf-8",
        )
        built = _cli(
            capsys,
            "data",
            "build",
            "--queries",
            str(queries),
            "--out",
            str(data),
            "--val-fraction",
            "0.25",
            "--synthetic-per-domain",
            "2",
            "--cross",
            "2",
            "--pool-random",
            "2",
            "--quiet",
        )
        assert built["labelled_val"] == 2
        retr = _cli(
            capsys,
            "train",
            "retriever",
            "--data",
            str(data),
            "--batch-size",
            "4",
            "--max-seq-length",
            "32",
            "--max-examples",
            "8",
            "--no-base-eval",
            "--quiet",
        )
        assert registry.active()["retriever"] == retr["retriever"] and "fine_tuned" in retr
        # Re-embed with the fine-tuned retriever (the service holds the active index open meanwhile), then the
        # router on the new index's vectors (it records that retriever).
        idx = _cli(capsys, "index", "build", "--quiet")
        assert idx["passages"] == 4 and idx["activated"]
        assert registry.manifest("index", idx["index"])["retriever"] == retr["retriever"]
        router = _cli(capsys, "train", "router", "--data", str(data), "--epochs", "1", "--quiet")
        assert router["val_queries"] == 2 and router["val_top1_accuracy"] is not None
        assert router["retriever"] == retr["retriever"] and router["fusion"]["questions"] == 2
        assert client.get("/domains").json()["versions"]["index"] == first["index"]  # old until reload
        r = client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 200 and r.json()["versions"]["index"] == idx["index"]
        ask = client.post("/ask", json={"query": "How do I refund a payment?", "generate": False}).json()
        assert ask["versions"] == {**ask["versions"], "index": idx["index"], "retriever": retr["retriever"], "router": router["router"]}

        # Reload with only the router changed: same index, now the new router (the open store is reused). The
        # service holds the index open: the router's fits read a copy of its shards, so none is skipped.
        again = _cli(capsys, "train", "router", "--data", str(data), "--epochs", "1", "--quiet")
        assert "skipped" not in again["fusion"] and again["fusion"]["questions"] == 2
        r = client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 200, r.text
        assert r.json()["versions"]["router"] == again["router"] and r.json()["versions"]["index"] == idx["index"]

        # A failed build and an interrupted build leave the active versions serving, and nothing half-built.
        before = registry.active()
        for exc in (RuntimeError("disk full"), KeyboardInterrupt()):
            with pytest.raises(type(exc)):
                rebuild_index(home, retriever="base", encoder=_FailingEncoder(encoder, exc), progress=False)
            assert registry.active() == before
            assert sorted(p.name for p in registry.kind_dir("index").iterdir()) == sorted(v.version for v in registry.list("index"))
        assert client.post("/admin/reload", headers=ADMIN).json()["versions"]["index"] == idx["index"]

        # An active version that cannot be loaded: reload says so (409) and the old pipeline keeps answering.
        broken = registry.new_version("index")
        registry.complete("index", broken, {"retriever": "base", "domains": {"orbit": 1}})
        registry.activate("index", broken)
        r = client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 409 and r.json()["reloaded"] is False
        assert r.json()["versions"]["index"] == idx["index"]
        assert client.post("/ask", json={"query": "refund", "generate": False}).status_code == 200

        # Rollback and activate from the command line, then reload.
        assert _cli(capsys, "models", "rollback", "index")["rolled_back_to"] == idx["index"]
        assert _cli(capsys, "models", "activate", first["index"])["active"]["index"] == first["index"]
        listed = _cli(capsys, "models", "list")
        assert [v["active"] for v in listed["versions"]["index"] if v["version"] == first["index"]] == [True]
        assert any(v["fine_tuned_acc1"] is not None for v in listed["versions"]["retriever"])
        r = client.post("/admin/reload", headers=ADMIN)
        assert r.status_code == 200 and r.json()["versions"]["index"] == first["index"] and r.json()["versions"]["retriever"] == "base"
        assert main(["models", "activate", "router-nope"]) == 2
        assert main(["models", "activate", "bogus"]) == 2


def test_registry_rollback_and_activate_need_complete_versions(tmp_path):
    registry = Registry(tmp_path)
    a, b = registry.new_version("router"), registry.new_version("router")
    for v in (a, b):
        registry.complete("router", v, {"domains": ["x"]})
    registry.activate("router", a)
    registry.activate("router", b)
    half = registry.new_version("router")  # never completed
    with pytest.raises(ArtifactError):
        registry.activate("router", half)
    assert registry.active()["router"] == b
    assert registry.rollback("router") == a and registry.active()["router"] == a
    with pytest.raises(ArtifactError):
        registry.rollback("router")
    assert sorted(v.version for v in registry.list("router")) == sorted([a, b])  # the half-built one is not listed


@pytest.mark.slow
def test_index_build_rejects_unknown_retriever(home):
    with pytest.raises(ArtifactError):
        rebuild_index(home, retriever="retriever-missing", progress=False)
