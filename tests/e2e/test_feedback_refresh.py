"""Issue 49 item 4, "in the refresh": on a small home (tests/data/fewlabel, ``fedqa ingest``) a curator confirms the
passage that answers a new question and marks another not covered; ``fedqa refresh --queries`` fits on both, says so,
records them in ``refresh.json`` and in the router version, and ``--no-feedback`` leaves them out; an ordinary key
voting 30 times for a wrong passage is left out of the refresh, and that passage is not first afterwards (issue 49,
"before or after a refresh"). Every step runs the real CLI in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.feedback.review import confirmation
from service.feedback.store import FeedbackBounds, FeedbackStore, Rating, Vote
from tests.utils import ROOT, json_documents, make_settings

DATA = ROOT / "tests" / "data" / "fewlabel"
CONFIRMED = ("How do I pick a theme for my site?", "sitewright/themes#000")
NOT_COVERED = "Does Mailpost support sending SMS?"
LATER = ("How do I see which links were clicked?", "mailpost/reports#000")
SPAM = ("How do I install a specific release of sitewright?", "mailpost/campaigns#000")  # a wrong passage


def _fedqa(home: Path, *args: str, stderr: bool = True) -> str:
    """Run ``fedqa ARGS`` on ``home`` on the ONNX encoder, whose export it finds in ``cache`` beside the home; its
    stdout and (``stderr``) stderr (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(FEDQA_HOME=str(home), FEDQA_CACHE=str(home.parent / "cache"), FEDQA_LLM_BACKEND="none", HF_HUB_OFFLINE="1")
    run = subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return run.stdout + (run.stderr if stderr else "")


def _router(home: Path) -> dict[str, Any]:
    """The active router version's manifest."""
    active = json.loads((home / "active.json").read_text(encoding="utf-8"))
    return json.loads((home / "routers" / active["router"] / "manifest.json").read_text(encoding="utf-8"))


def _ask(home: Path, *questions: str) -> list[dict[str, Any]]:
    """``fedqa ask``'s answers to ``questions`` (one process)."""
    return json_documents(_fedqa(home, "ask", *questions, stderr=False))


def _router_probability(answer: dict[str, Any]) -> float:
    """The router's highest product probability in a served answer."""
    return float(answer["confidence"]["evidence"]["max_prob"])


@pytest.mark.slow
def test_refresh_fits_on_the_feedback_records_it_and_skips_when_it_is_unchanged(tmp_path: Path, fewlabel_cache: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "cache").symlink_to(fewlabel_cache)  # the ONNX encoder's export for these pages: made once per run
    _fedqa(home, "ingest", str(DATA / "docs"))
    _fedqa(home, "feedback", "confirm", "--query", CONFIRMED[0], "--doc-id", CONFIRMED[1])
    _fedqa(home, "feedback", "confirm", "--query", NOT_COVERED, "--not-covered")
    settings = make_settings(home)  # a passage confirmed on an index since rebuilt: not in this one
    gone = confirmation(
        "Which port does the preview use?",
        {"sitewright/preview#007": "sitewright"},
        not_covered=False,
        curator="cli:old",
        key_products=None,
        index_version=None,
    )
    FeedbackStore(settings.feedback_path).confirm(gone, FeedbackBounds.of(settings))
    spam = Vote(SPAM[0], "ordinary", None, trusted=False, index_version=None, rating=Rating.UP, doc_id=SPAM[1], domain="mailpost")
    for _ in range(30):  # one ordinary key, 30 times: one vote, below FEDQA_FEEDBACK_MIN_KEYS
        FeedbackStore(settings.feedback_path).record(spam, FeedbackBounds.of(settings))

    out = _fedqa(home, "refresh", "--queries", str(DATA / "queries.jsonl"), "--quiet")
    assert "feedback: 1 labelled question(s), 1 out-of-scope question(s)" in out and "left out: 1 with no passage in the index" in out, out
    counts = {"read": True, "queries": 1, "out_of_scope": 1, "not_in_index": 1, "in_files": 0, "min_keys": settings.feedback_min_keys}
    recorded = json.loads((home / "refresh.json").read_text(encoding="utf-8"))["feedback"]
    assert {k: recorded[k] for k in counts} == counts and recorded["fingerprint"]
    router = _router(home)
    assert router["feedback"] == counts
    assert router["train_by_group"].get("out-of-scope") == 1  # the question marked not covered: fitted to no product
    assert router["metrics"]["page_prior"]["known_answers"] == 1  # the confirmed passage: a known answer of its question
    marked, spammed = _ask(home, NOT_COVERED, SPAM[0])
    with_feedback = _router_probability(marked)
    assert spammed["sources"][0]["doc_id"] != SPAM[1]  # the 30 votes neither labelled the question nor moved its passage

    out = _fedqa(home, "refresh", "--quiet")  # no arguments: the recorded files, the same feedback
    assert "activated together: nothing (every stage unchanged)" in out, out
    assert _router(home)["version"] == router["version"]

    _fedqa(home, "feedback", "confirm", "--query", LATER[0], "--doc-id", LATER[1])
    out = _fedqa(home, "refresh", "--quiet")  # a new confirmation: the stages that read questions fit again
    assert "feedback: 2 labelled question(s), 1 out-of-scope question(s)" in out, out
    assert _router(home)["version"] != router["version"] and _router(home)["metrics"]["page_prior"]["known_answers"] == 2

    out = _fedqa(home, "refresh", "--quiet", "--no-feedback")
    assert "feedback: not read (--no-feedback)" in out, out
    plain = _router(home)
    assert plain["feedback"]["read"] is False and "out-of-scope" not in plain["train_by_group"]
    assert "page_prior" not in plain["metrics"]  # no labelled question has a gold passage
    without_feedback = _router_probability(*_ask(home, NOT_COVERED))
    assert with_feedback < 0.5 <= without_feedback, (with_feedback, without_feedback)
    assert len(list((fewlabel_cache / "onnx").iterdir())) == 1  # every process loaded the one export
