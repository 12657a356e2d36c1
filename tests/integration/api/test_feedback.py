"""Feedback (issue 49, first part): ``POST /feedback`` validated against the index and the key's products, stored once
per key, question and passage in the home's SQLite file, bounded; curators' keys trusted; the review queue
(``GET /admin/feedback``, ``fedqa feedback list``) and the export that ``fedqa train router --queries`` reads.

The first three tests share one app and its feedback file, in order: each reads what the ones before it sent."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import ServiceState
from service.cli.main import build_parser, main
from service.config import Settings, get_settings
from service.feedback.store import FeedbackBounds, FeedbackStore, Vote
from service.queries import Catalogue, check_labels, load_queries
from tests.utils import make_settings, pipeline_with

KEYS = {"orbit": "k-orbit", "orbit2": "k-orbit-2", "curator": "k-curator"}
ADMIN = "k-admin"


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _app(settings: Settings, pipeline: Any) -> TestClient:
    state = ServiceState(settings)
    state.pipeline = pipeline_with(pipeline)
    return TestClient(create_app(settings, state))  # no lifespan: the shared pipeline stays open


def _h(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN if name == 'admin' else KEYS[name]}"}


@pytest.fixture(scope="module")
def fb(demo_pipeline, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """An app on a home of its own (its feedback file) with the demo pipeline: two ordinary orbit keys, an orbit
    curator and FEDQA_ADMIN_KEY; one orbit and one relay passage of the index."""
    home = tmp_path_factory.mktemp("feedback-home")
    keys_file = home / "keys.json"
    entries = [
        {"name": "orbit team", "key_sha256": _sha(KEYS["orbit"]), "domains": ["orbit"]},
        {"name": "orbit team 2", "key_sha256": _sha(KEYS["orbit2"]), "domains": ["orbit"]},
        {"name": "orbit curator", "key_sha256": _sha(KEYS["curator"]), "domains": ["orbit"], "curator": True},
    ]
    keys_file.write_text(json.dumps(entries), encoding="utf-8")
    settings = make_settings(home, api_keys_file=keys_file, admin_key=ADMIN, rate_limit_per_minute=0)
    orbit = [p.doc_id for p in islice(demo_pipeline.store.iter_passages("orbit"), 3)]
    relay = next(iter(demo_pipeline.store.iter_passages("relay"))).doc_id
    yield SimpleNamespace(home=home, settings=settings, client=_app(settings, demo_pipeline), orbit=orbit, relay=relay, pipeline=demo_pipeline)


def _cli(home: Path, *argv: str) -> int:
    """``fedqa ARGV`` in this process on ``home``."""
    import os

    before = os.environ.get("FEDQA_HOME")
    os.environ["FEDQA_HOME"] = str(home)
    get_settings.cache_clear()
    try:
        return main(list(argv))
    finally:
        if before is None:
            os.environ.pop("FEDQA_HOME")
        else:
            os.environ["FEDQA_HOME"] = before
        get_settings.cache_clear()


def test_feedback_is_validated_against_the_index_and_the_keys_products(fb):
    c, doc = fb.client, fb.orbit[0]
    q = "How do I create a workspace?"
    cases = [
        ({"query": q}, 422),  # neither a rating nor not_covered
        ({"query": q, "rating": "up"}, 422),  # a rating needs its passage
        ({"query": q, "rating": "maybe", "doc_id": doc}, 422),
        ({"query": "x" * 2001, "not_covered": True}, 422),  # FEDQA_MAX_QUERY_CHARS, as /ask
        ({"query": q, "rating": "up", "doc_id": "orbit/no-such-page#000"}, 422),
        ({"query": q, "rating": "down", "doc_id": fb.relay}, 403),  # a passage of a product the key does not see
        ({"query": q, "rating": "up", "doc_id": doc, "comment": "the first step"}, 202),
    ]
    for body, status in cases:
        r = c.post("/feedback", json=body, headers=_h("orbit"))
        assert r.status_code == status, (body, r.text)
        if status == 403:
            assert "relay" not in r.text.replace(fb.relay, "")  # names no product beyond what the caller sent
    assert r.json()["id"].startswith("fb-")
    assert c.post("/feedback", json={"query": q, "not_covered": True}).status_code == 401
    assert c.get("/admin/feedback", headers=_h("orbit")).status_code == 403  # the queue: admin key only
    stored = FeedbackStore(fb.settings.feedback_path).votes()
    assert [(v.vote.key_name, v.vote.key_products, v.vote.trusted, v.vote.domain) for v in stored] == [("orbit team", ("orbit",), False, "orbit")]
    assert stored[0].vote.index_version == fb.pipeline.store.version and stored[0].vote.comment == "the first step"
    written = b"".join(f.read_bytes() for f in fb.settings.feedback_path.parent.iterdir())  # the database and its WAL
    assert b"orbit team" in written and KEYS["orbit"].encode() not in written  # the key's name, never the key


def test_one_key_voting_30_times_is_one_vote_and_only_agreed_or_trusted_feedback_is_exported(fb, tmp_path, capsys):
    c, (wrong, right, other) = fb.client, fb.orbit
    spam, confirmed, agreed = "How do I invite a teammate?", "What plans are there?", "Can I rename a workspace?"
    ids = {c.post("/feedback", json={"query": spam, "rating": "up", "doc_id": wrong}, headers=_h("orbit")).json()["id"] for _ in range(30)}
    assert len(ids) == 1
    rows = [v for v in FeedbackStore(fb.settings.feedback_path).votes() if v.vote.norm == "how do i invite a teammate"]
    assert len(rows) == 1 and rows[0].times == 30
    assert c.post("/feedback", json={"query": confirmed + "  ", "rating": "up", "doc_id": right}, headers=_h("curator")).status_code == 202
    for key in ("orbit", "orbit2"):
        assert c.post("/feedback", json={"query": agreed, "rating": "up", "doc_id": other}, headers=_h(key)).status_code == 202
    assert c.post("/feedback", json={"query": "Is there a mobile app?", "not_covered": True}, headers=_h("admin")).status_code == 202

    out = tmp_path / "feedback.jsonl"
    assert _cli(fb.home, "feedback", "export", "--out", str(out), "--min-keys", "2") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queries"] == 2 and summary["out_of_scope"] == 1
    queries = load_queries(out)
    assert {q.query: q.gold_doc_ids for q in queries} == {confirmed: [right], agreed: [other]}  # not the spammed vote
    assert all(q.domains == ["orbit"] for q in queries)
    oos = load_queries(summary["out_of_scope_file"], require_domains=True)
    assert [(q.query, q.domains) for q in oos] == [("Is there a mobile app?", [])]
    # What 'fedqa train router --queries' checks before it trains: the file parses and its labels are the index's.
    assert build_parser().parse_args(["train", "router", "--queries", str(out)]).queries == str(out)
    store = fb.pipeline.store
    catalogue = Catalogue.of("the index", fb.pipeline.domains, (p.doc_id for d in fb.pipeline.domains for p in store.iter_passages(d)))
    assert check_labels(queries, catalogue).queries == queries

    assert _cli(fb.home, "feedback", "export", "--out", str(out), "--min-keys", "3") == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 1  # two ordinary keys no longer suffice; the curator does


def test_feedback_survives_a_new_app_and_the_queue_lists_what_needs_review(fb, capsys):
    again = _app(fb.settings, fb.pipeline)  # a new app instance on the same home
    r = again.get("/admin/feedback", headers=_h("admin"))
    assert r.status_code == 200, r.text
    queue = {q["query"]: q for q in r.json()["questions"]}
    assert "What plans are there?" not in queue  # confirmed by the curator, never rated down: settled
    spam = queue["How do I invite a teammate?"]
    assert (spam["keys"], spam["up_keys"], spam["confirmed"]) == (1, 1, False)
    assert queue["Can I rename a workspace?"]["keys"] == 2
    assert list(queue)[0] == "Can I rename a workspace?"  # most distinct keys first
    assert queue["Is there a mobile app?"]["not_covered_confirmed"] is True
    assert _cli(fb.home, "feedback", "list", "--json") == 0
    assert json.loads(capsys.readouterr().out) == r.json()


def test_the_store_is_bounded_by_age_and_by_rows_per_key(tmp_path):
    store, bounds = FeedbackStore(tmp_path / "f.sqlite"), FeedbackBounds(keep_days=1.0, max_per_key=3)

    def vote(key: str, n: int) -> Vote:
        return Vote(query=f"question {n}", key_name=key, key_products=None, trusted=False, index_version="v1", not_covered=True)

    t0 = 1_700_000_000.0
    for n in range(5):
        store.record(vote("a", n), bounds, now=t0 + n)
    store.record(vote("b", 0), bounds, now=t0 + 5)
    kept = sorted((v.vote.key_name, v.vote.query) for v in store.votes())
    assert kept == [("a", "question 2"), ("a", "question 3"), ("a", "question 4"), ("b", "question 0")]  # a's newest 3
    store.record(vote("b", 1), bounds, now=t0 + 86400 + 3.5)  # a day later: a's two oldest rows have expired
    assert sorted((v.vote.key_name, v.vote.query) for v in store.votes()) == [("a", "question 4"), ("b", "question 0"), ("b", "question 1")]
    assert [v.vote.query for v in store.votes(bounds, now=t0 + 3 * 86400)] == []  # reads leave out what expired since
