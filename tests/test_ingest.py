"""Loading the exchange format and page folders, and idempotent ingestion into versioned indexes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexes.ingest import ingest
from indexes.loaders import LoadError, load_jsonl
from service.artifacts import Registry
from service.retrieval.edge_store import EdgeBackend
from tests.conftest import make_settings


def _write_site(root: Path) -> None:
    (root / "orbit").mkdir(parents=True)
    (root / "ledger" / "guides").mkdir(parents=True)
    (root / "orbit" / "contacts.md").write_text(
        "# Contacts\n\nContacts hold people.\n\n## Importing\n\nUse Contacts > Import to load a CSV file of up to "
        "50,000 rows.\n\n## Merging\n\nMerge duplicates from the contact page.\n",
        encoding="utf-8",
    )
    (root / "ledger" / "guides" / "refunds.html").write_text(
        "<html><head><title>Refunds</title></head><body><h1>Refunds</h1><p>Refund a payment from the invoice page."
        "</p><h2>Partial refunds</h2><p>Enter an amount lower than the total.</p></body></html>",
        encoding="utf-8",
    )
    (root / "ledger" / "notes.txt").write_text("Ledger keeps seven years of invoices.\n", encoding="utf-8")


def test_folder_ingest_makes_one_collection_per_domain_with_provenance(tmp_path, encoder):
    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home")
    report = ingest([site], settings, encoder=encoder, progress=False)
    assert report.domains == {"ledger": 3, "orbit": 3}
    store = EdgeBackend(Registry(settings.home_dir)).open(report.version)
    orbit = {p.doc_id: p for p in store.iter_passages("orbit")}
    assert orbit["orbit/contacts#001"].title == "Contacts > Importing"
    assert orbit["orbit/contacts#001"].source == "orbit/contacts.md"
    ledger = {p.doc_id: p for p in store.iter_passages("ledger")}
    assert ledger["ledger/guides/refunds#001"].title == "Refunds > Partial refunds"
    assert ledger["ledger/notes#000"].text == "Ledger keeps seven years of invoices."
    store.close()


def test_reingesting_same_input_is_idempotent_and_changes_make_a_new_version(tmp_path, encoder):
    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home")
    registry = Registry(settings.home_dir)
    first = ingest([site], settings, encoder=encoder, progress=False)
    again = ingest([site], settings, encoder=encoder, progress=False)
    assert not again.changed and again.version == first.version
    assert again.unchanged == 6 and again.added == 0
    assert registry.active()["index"] == first.version

    (site / "orbit" / "contacts.md").write_text(
        (site / "orbit" / "contacts.md").read_text(encoding="utf-8").replace("50,000", "60,000"), encoding="utf-8"
    )
    third = ingest([site], settings, encoder=encoder, progress=False)
    assert third.changed and third.updated == 1 and third.unchanged == 5
    assert registry.active()["index"] == third.version
    assert third.domains == first.domains


def test_jsonl_errors_name_the_line(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"doc_id": "a#1", "domain": "x", "text": "ok"}\n{"doc_id": "a#2", "domain": "x"}\n', encoding="utf-8")
    with pytest.raises(LoadError, match=r"docs.jsonl:2: missing text"):
        list(load_jsonl(bad))
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(LoadError, match=r":1: not JSON"):
        list(load_jsonl(bad))
    bad.write_text(json.dumps({"doc_id": "a", "domain": "Bad Name", "text": "t"}) + "\n", encoding="utf-8")
    with pytest.raises(LoadError, match="domain"):
        list(load_jsonl(bad))


def test_interrupted_build_leaves_previous_index_active(tmp_path, encoder):
    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home")
    registry = Registry(settings.home_dir)
    first = ingest([site], settings, encoder=encoder, progress=False)

    class Interrupting:
        """The real encoder, interrupted (Ctrl-C) on its first batch of passages."""

        version, path, dim, count_tokens = encoder.version, encoder.path, encoder.dim, encoder.count_tokens

        def embed_passages(self, texts, **kw):
            raise KeyboardInterrupt

    (site / "orbit" / "new.md").write_text("# New\n\nA new page.\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        ingest([site], settings, encoder=Interrupting(), progress=False)  # type: ignore[arg-type]
    assert registry.active()["index"] == first.version
    assert [v.version for v in registry.list("index")] == [first.version]
    assert sorted(p.name for p in registry.kind_dir("index").iterdir()) == [first.version]
