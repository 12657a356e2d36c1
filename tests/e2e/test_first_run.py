"""What a new user sees first: ``fedqa status`` in plain words, a service log without third-party chatter."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from service.cli import main


def status_of(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``fedqa status`` prints for the home ``home``."""
    from service.config import get_settings

    monkeypatch.setenv("FEDQA_HOME", str(home))
    get_settings.cache_clear()
    try:
        assert main(["status"]) == 0
    finally:
        get_settings.cache_clear()
    return capsys.readouterr().out


def test_status_of_an_empty_home_says_what_is_missing_and_the_command_that_adds_it(tmp_path, monkeypatch, capsys):
    out = status_of(tmp_path / "home", monkeypatch, capsys)
    assert f"fedqa home {tmp_path / 'home'}" in out
    assert "missing  index: nothing to search" in out and "add it: fedqa ingest PATH" in out
    assert "missing  router" in out and "fedqa refresh --queries FILE" in out


def test_the_service_log_keeps_absl_chatter_out():
    """rouge-score (the evaluation's ROUGE) logs through absl at INFO: not a line of the service's JSON log."""
    from service.evaluation.wixqa import _rouge
    from service.logs import configure_logging

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("json", "INFO", stream=stream)
        _rouge().score("the cat sat", "a cat sat")
        logging.getLogger("fedqa.test").info("a line of ours")
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    assert [x["logger"] for x in lines] == ["fedqa.test"]


def test_an_ingest_shows_its_progress_and_its_seconds_through_a_real_process(tmp_path):
    """Issue 29 item 8: a step over a few seconds shows progress (the passages' bar on stderr, unless ``--quiet``, which
    silences the libraries' bars too), and the reported seconds cover the whole command, model loading included."""
    import time

    from tests.integration.cli.test_cli_errors import fedqa

    page = tmp_path / "docs" / "acme" / "guide.md"
    page.parent.mkdir(parents=True)
    keys = "Rotate an API key in Settings: create the new key, move every client to it, then revoke the old one. " * 3
    invoices = "Invoices are kept for seven years and can be downloaded as PDF from the billing page at any time. " * 3
    page.write_text(f"# Guide\n\n## Keys\n\n{keys}\n\n## Invoices\n\n{invoices}\n")  # sections long enough to stand alone
    t0 = time.perf_counter()
    shown = fedqa("ingest", str(tmp_path / "docs"), home=tmp_path / "home")
    wall = time.perf_counter() - t0
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "embedding passages" in shown.stderr and "2/2" in shown.stderr
    report = json.loads(shown.stdout[shown.stdout.index("{") :])
    assert report["added"] == 2 and 0 < report["seconds"] <= wall
    page.write_text(page.read_text() + "\n## Refunds\n\n" + "Refund a payment from the invoice page. " * 8 + "\n")
    quiet = fedqa("ingest", str(tmp_path / "docs"), "--quiet", home=tmp_path / "home")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "embedding passages" not in quiet.stderr
    # nor a library's bar (the PyTorch encoder's "Loading weights") or bm25s's debug lines
    assert "%|" not in quiet.stderr and "Loading weights" not in quiet.stderr and " DEBUG " not in quiet.stderr, quiet.stderr[-2000:]
    assert "Loading weights" in shown.stderr  # which the command shows without --quiet
