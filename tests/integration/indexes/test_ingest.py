"""Loading the exchange format and page folders, and idempotent ingestion into versioned indexes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexes.build import EmptyBuild
from indexes.ingest import IngestMode, ingest, ingest_lock
from indexes.loaders import LoadError, LoadReport, load_jsonl
from indexes.rebuild import rebuild_index
from service.artifacts import Registry
from service.config import Settings
from service.retrieval.edge_store import EdgeBackend
from service.retrieval.federated import merge
from service.retrieval.passage import Hit, point_id
from tests.conftest import make_settings
from tests.utils import ROOT, present


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
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    report = ingest([site], settings, encoder=encoder, progress=False)
    assert report.domains == {"ledger": 3, "orbit": 3}
    store = EdgeBackend(Registry(settings.home_dir)).open(present(report.version))
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
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
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
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
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


def _sections(n: int) -> str:
    return "# Setup\n\n" + "".join(f"## Step {i}\n\nStep {i} of the setup turns on feature number {i}.\n\n" for i in range(n))


def _doc_ids(settings: Settings, version: str | None) -> dict[str, set[str]]:
    """Every domain's doc ids in the index version an ingest reported."""
    store = EdgeBackend(Registry(settings.home_dir)).open(present(version))
    try:
        return {d: {p.doc_id for p in store.iter_passages(d)} for d in store.domains()}
    finally:
        store.close()


def test_reingest_mirrors_the_folder_pages_that_shrank_or_left_lose_their_passages(tmp_path, encoder):
    site = tmp_path / "site"
    _write_site(site)
    (site / "orbit" / "setup.md").write_text(_sections(5), encoding="utf-8")
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    first = ingest([site], settings, encoder=encoder, progress=False)
    assert {f"orbit/setup#{i:03d}" for i in range(5)} <= _doc_ids(settings, first.version)["orbit"]

    (site / "orbit" / "setup.md").write_text(_sections(3), encoding="utf-8")  # 5 sections -> 3
    (site / "ledger" / "notes.txt").unlink()  # a page deleted
    second = ingest([site], settings, encoder=encoder, progress=False)
    assert second.changed and (second.added, second.updated, second.removed) == (0, 0, 3)
    ids = _doc_ids(settings, second.version)
    assert {"orbit/setup#003", "orbit/setup#004", "ledger/notes#000"}.isdisjoint(ids["orbit"] | ids["ledger"])
    assert {"orbit/setup#000", "orbit/setup#002", "ledger/guides/refunds#000"} <= ids["orbit"] | ids["ledger"]
    assert second.domains == {"ledger": 2, "orbit": 6}
    assert Registry(settings.home_dir).active()["index"] == second.version

    # --add: one more page joins the index, nothing else is removed.
    extra = tmp_path / "faq.md"
    extra.write_text("# FAQ\n\nOrbit syncs contacts every hour.\n", encoding="utf-8")
    third = ingest([extra], settings, domain="orbit", encoder=encoder, progress=False, mode=IngestMode.ADD)
    assert (third.added, third.removed) == (1, 0) and third.domains == {"ledger": 2, "orbit": 7}
    # Without --add the index mirrors its input: that page alone (a domain left with no passage is gone).
    fourth = ingest([extra], settings, domain="orbit", encoder=encoder, progress=False)
    assert (fourth.added, fourth.removed, fourth.unchanged) == (0, 8, 1) and fourth.domains == {"orbit": 1}
    assert _doc_ids(settings, fourth.version) == {"orbit": {"orbit/faq#000"}}


def test_pages_sharing_a_stem_get_distinct_doc_ids(tmp_path, encoder):
    site = tmp_path / "site"
    (site / "orbit").mkdir(parents=True)
    (site / "orbit" / "guide.md").write_text("# Guide\n\nThe Markdown guide explains imports.\n", encoding="utf-8")
    (site / "orbit" / "guide.html").write_text("<h1>Guide</h1><p>The HTML guide explains exports.</p>", encoding="utf-8")
    (site / "orbit" / "other.md").write_text("# Other\n\nAnother page.\n", encoding="utf-8")
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    report = ingest([site], settings, encoder=encoder, progress=False)
    assert report.duplicates == 0 and report.domains == {"orbit": 3}
    assert _doc_ids(settings, report.version) == {"orbit": {"orbit/guide.md#000", "orbit/guide.html#000", "orbit/other#000"}}


def test_the_same_doc_id_in_two_domains_is_two_passages(tmp_path, encoder):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "\n".join(
            json.dumps({"doc_id": "faq#000", "domain": d, "title": "FAQ", "text": f"The {d} FAQ answers {d} questions."}) for d in ("orbit", "ledger")
        )
        + "\n",
        encoding="utf-8",
    )
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    report = ingest([docs], settings, encoder=encoder, progress=False)
    assert report.duplicates == 0 and report.domains == {"ledger": 1, "orbit": 1}
    assert _doc_ids(settings, report.version) == {"ledger": {"faq#000"}, "orbit": {"faq#000"}}
    # The federated merge keeps both: a hit is (domain, point id).
    pid = point_id("faq#000")
    merged = merge({"orbit": [Hit(pid, 0.5)], "ledger": [Hit(pid, 0.4)]}, {"orbit": 1.0, "ledger": 1.0}, 5)
    assert [c.domain for c in merged] == ["orbit", "ledger"]


def test_an_ingest_without_passages_is_refused_and_nothing_is_activated(tmp_path, encoder, capsys, monkeypatch):
    empty = tmp_path / "empty"
    (empty / "orbit").mkdir(parents=True)
    (empty / "orbit" / "blank.md").write_text("\n\n", encoding="utf-8")
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    registry = Registry(settings.home_dir)
    with pytest.raises(LoadError, match="product 'orbit' yields no passage: no text"):
        ingest([empty], settings, encoder=encoder, progress=False)
    assert registry.active()["index"] is None and registry.list("index") == []
    assert not registry.kind_dir("index").is_dir() or list(registry.kind_dir("index").iterdir()) == []
    # On a home with an index, an empty input does not mirror it away.
    site = tmp_path / "site"
    _write_site(site)
    first = ingest([site], settings, encoder=encoder, progress=False)
    (tmp_path / "none.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(EmptyBuild):
        ingest([tmp_path / "none.jsonl"], settings, encoder=encoder, progress=False)
    assert registry.active()["index"] == first.version and [v.version for v in registry.list("index")] == [first.version]
    # The command line says so and exits 2.
    from service.cli import main
    from service.config import get_settings

    monkeypatch.setenv("FEDQA_HOME", str(tmp_path / "fresh"))
    monkeypatch.setenv("FEDQA_ENCODER_BACKEND", "torch")  # no ONNX export for a refused ingest
    get_settings.cache_clear()
    try:
        assert main(["ingest", str(empty), "--quiet"]) == 2
        assert "product 'orbit' yields no passage" in capsys.readouterr().err
        assert Registry(tmp_path / "fresh").active()["index"] is None
    finally:
        get_settings.cache_clear()


def test_a_page_deleted_from_the_folder_is_gone_from_ask_after_reingest_and_reload(tmp_path, encoder):
    import httpx

    from service.api.app import create_app
    from service.api.state import ServiceState
    from service.pipeline import Pipeline
    from service.routing.router import UniformRouter
    from tests.utils import served_app

    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home", admin_key="admin-secret", rate_limit_per_minute=0, min_passage_chars=0)
    ingest([site], settings, encoder=encoder, progress=False)
    registry = Registry(settings.home_dir)

    def loader(settings, backend_=None, store=None):  # noqa: ANN001 - ServiceState's loader signature
        store = EdgeBackend(registry).open(present(registry.active()["index"]))
        return Pipeline(settings, router=UniformRouter(store.domains()), encoder=encoder, store=store)

    ask = {"query": "How many years of invoices does Ledger keep?", "strategy": "uis", "generate": False, "top_k": 10}
    with served_app(create_app(settings, ServiceState(settings, loader=loader)), lifespan="on") as url, httpx.Client(base_url=url, timeout=60) as c:
        before = [s["doc_id"] for s in c.post("/ask", json=ask).json()["sources"]]
        assert before[0] == "ledger/notes#000" and len(before) == 6
        (site / "ledger" / "notes.txt").unlink()
        report = ingest([site], settings, encoder=encoder, progress=False)
        assert report.removed == 1
        assert c.post("/admin/reload", headers={"Authorization": "Bearer admin-secret"}).status_code == 200
        after = [s["doc_id"] for s in c.post("/ask", json=ask).json()["sources"]]
        assert len(after) == 5 and "ledger/notes#000" not in after


def test_a_product_folder_without_a_readable_page_is_refused_before_a_model_loads(tmp_path, capsys, monkeypatch):
    """A folder of files fedqa does not read is named, with what it holds, before any encoder is loaded or exported."""
    from service.cli import main
    from service.config import get_settings

    site = tmp_path / "site"
    _write_site(site)
    (site / "slides").mkdir()
    (site / "slides" / "deck.pptx").write_bytes(b"PK")
    (site / "slides" / "notes.docx").write_bytes(b"PK")
    home = tmp_path / "home"
    monkeypatch.setenv("FEDQA_HOME", str(home))
    get_settings.cache_clear()
    try:
        assert main(["ingest", str(site), "--quiet"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert (
        "product 'slides' has no page fedqa reads (1 .docx, 1 .pptx)" in err or "product 'slides' has no page fedqa reads (1 .pptx, 1 .docx)" in err
    )
    assert ".pdf" in err and ".rst" in err  # what it does read
    assert not (home / "cache").exists() and Registry(home).active()["index"] is None  # no export, nothing written


def test_the_ingest_report_lists_skipped_files_and_pages_per_product(tmp_path, encoder):
    site = tmp_path / "site"
    _write_site(site)
    (site / "orbit" / "logo.png").write_bytes(b"\x89PNG")
    (site / "orbit" / "toc.html").write_text(
        "<html><body><ul><li><a href='contacts.html'>Contacts</a></li><li><a href='import.html'>Importing</a></li></ul></body></html>",
        encoding="utf-8",
    )
    loaded = LoadReport()
    ingest([site], make_settings(tmp_path / "home"), encoder=encoder, progress=False, loaded=loaded)
    orbit = loaded.domains["orbit"].summary()
    assert orbit["pages_read"] == 1 and orbit["passages"] == 1
    assert {(s["page"], s["reason"]) for s in orbit["skipped"]} == {
        ("orbit/logo.png", "unsupported file type .png"),
        ("orbit/toc.html", "only navigation or link lists"),
    }
    assert 0 < orbit["boilerplate_dropped"] < 1
    assert loaded.domains["ledger"].summary()["pages_read"] == 2


def test_two_ingests_adding_at_once_keep_both_additions(tmp_path, encoder):
    """Issue 50, fault 6: two real ``fedqa ingest --add`` processes started at once on one home both built on the same
    active index, and the second to activate dropped the first's page. Now the second waits for the first (the home's
    ingest lock) and builds on the version it activated."""
    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    first = ingest([site], settings, encoder=encoder, progress=False)
    pages = []
    for name in ("alpha", "beta"):
        page = tmp_path / name / f"{name}.md"
        page.parent.mkdir()
        page.write_text(f"# {name.title()}\n\nThe {name} page explains {name} imports.\n", encoding="utf-8")
        pages.append(page)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(
        FEDQA_HOME=str(settings.home_dir),
        FEDQA_CACHE=str(tmp_path / "home" / "cache"),
        FEDQA_MIN_PASSAGE_CHARS="0",
        FEDQA_LLM_BACKEND="none",
        HF_HUB_OFFLINE="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "service.cli", "ingest", str(page), "--domain", "orbit", "--add", "--quiet"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for page in pages
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    versions = {json.loads(out)["index"] for out, _ in outs}
    active = Registry(settings.home_dir).active()["index"]
    assert len(versions) == 2 and active in versions and first.version not in versions
    assert {"orbit/alpha#000", "orbit/beta#000", "orbit/contacts#000"} <= _doc_ids(settings, active)["orbit"], "an addition was lost"


def test_an_index_build_waits_for_a_running_ingest_and_builds_on_its_version(tmp_path, encoder, caplog):
    """Issue 50, "Reliability and security 3": ``fedqa index build`` did not take the home's ingest lock, so a build
    and an ingest at once both read the same active index, and the second to activate dropped the first's work (the
    ingest's new page, or the build's re-embedding). Now the build waits for the ingest to activate its version, then
    re-embeds that version."""
    site = tmp_path / "site"
    _write_site(site)
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    registry = Registry(settings.home_dir)
    first = present(ingest([site], settings, encoder=encoder, progress=False).version)
    page = tmp_path / "extra" / "export.md"
    page.parent.mkdir()
    page.write_text("# Export\n\nExport contacts to a CSV file from the contact list.\n", encoding="utf-8")
    holding, proceed, added = threading.Event(), threading.Event(), []

    def running_ingest() -> None:  # an ingest that holds the lock while it builds, then activates
        with ingest_lock(registry):
            holding.set()
            proceed.wait(120)
            added.append(ingest([page], settings, domain="orbit", encoder=encoder, progress=False, mode=IngestMode.ADD).version)

    built: list[str | None] = []
    ingesting = threading.Thread(target=running_ingest)
    building = threading.Thread(target=lambda: built.append(rebuild_index(settings, retriever="base", encoder=encoder, progress=False).version))
    ingesting.start()
    assert holding.wait(30)
    with caplog.at_level(logging.WARNING, logger="fedqa.indexes"):
        building.start()
        deadline = time.monotonic() + 60
        while building.is_alive() and "waiting for it to activate" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        waited = building.is_alive() and registry.active()["index"] == first
        proceed.set()
        ingesting.join(120)
        building.join(120)
    assert waited, "the build did not wait for the running ingest"
    second, rebuilt = present(added[0]), present(built[0])
    assert registry.manifest("index", rebuilt)["rebuilt_from"] == second and registry.active()["index"] == rebuilt
    assert "orbit/export#000" in _doc_ids(settings, rebuilt)["orbit"]  # the ingest's page is in the rebuilt index
