"""The fedqa command line on a small folder of pages: ingest, train the router, ask (real MiniLM, a training run)."""

from __future__ import annotations

import json
import threading

import pytest

from service.cli import main
from tests.utils import json_documents


@pytest.mark.slow
def test_ingest_train_ask_from_the_command_line(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    for domain, text in {
        "orbit": "# Contacts\n\n## Import\n\nImport contacts from a CSV file under Contacts > Import.\n",
        "ledger": "# Refunds\n\n## Refund a payment\n\nOpen the invoice and click Refund to return money to the card.\n",
    }.items():
        (site / domain).mkdir(parents=True)
        (site / domain / "page.md").write_text(text, encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "\n".join(
            json.dumps({"qid": f"q{i}", "query": q, "domains": [d]})
            for i, (q, d) in enumerate([("import contacts", "orbit"), ("refund a payment", "ledger")] * 4)
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("FEDQA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FEDQA_LLM_BACKEND", "none")
    from service.config import get_settings

    get_settings.cache_clear()
    try:
        assert main(["ingest", str(site), "--quiet"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["domains"] == {"ledger": 1, "orbit": 1} and report["new_version"]

        assert main(["train", "router", "--queries", str(queries), "--epochs", "1", "--quiet"]) == 0
        assert json.loads(capsys.readouterr().out)["router"].startswith("router-")

        assert main(["ask", "How do I refund a payment?", "--no-generate", "--top-k", "1"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["sources"][0]["doc_id"] == "ledger/page#000"

        # several questions: one JSON answer each, in the order asked; the one-off process embeds no sentence in the
        # background for answers it will not give (it competed with these, and was cut off at exit)
        started: list[str] = []
        threading.settrace(lambda frame, event, arg: started.append(threading.current_thread().name))
        try:
            assert main(["ask", "How do I import contacts?", "How do I refund a payment?", "--top-k", "1"]) == 0
        finally:
            threading.settrace(None)
        assert "fedqa-sentence-vectors" not in started and "MainThread" not in started
        answers = json_documents(capsys.readouterr().out)
        assert [(a["query"], a["sources"][0]["doc_id"]) for a in answers] == [
            ("How do I import contacts?", "orbit/page#000"),
            ("How do I refund a payment?", "ledger/page#000"),
        ]
        assert main(["ask", "How do I import contacts?", ""]) == 2  # an empty question is refused before any is answered
        assert capsys.readouterr().out == ""

        assert main(["ingest", str(tmp_path / "missing")]) == 2
        assert "no such file" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
