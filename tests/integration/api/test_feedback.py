"""Feedback (issue 49, first part): ``POST /feedback`` validated against the index and the key's products, stored once
per key, question and passage in the home's SQLite file, bounded; curators' keys trusted; the review queue
(``GET /admin/feedback``, ``fedqa feedback list``) and the export that ``fedqa train router --queries`` reads.

The first three tests share one app and its feedback file, in order: each reads what the ones before it sent."""

from __future__ import annotations

import hashlib
import json
import shutil
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

    names = ("FEDQA_HOME", "FEDQA_CACHE")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(FEDQA_HOME=str(home), FEDQA_CACHE=str(home / "cache"))  # the copy's encoder export
    get_settings.cache_clear()
    try:
        return main(list(argv))
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
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


# --------------------------------------------------------------------------- issue 49, item 5: chat completions, confirm
OFF_TOPIC = ("What is the boiling point of mercury in kelvin?", "Who won the football world cup in 1998?", "How long should sourdough bread proof?")


@pytest.fixture(scope="module")
def chat_fb(fb, tmp_path_factory) -> SimpleNamespace:
    """Another home with the same keys (its own feedback file), served by the real app on the demo pipeline."""
    home = tmp_path_factory.mktemp("feedback-chat-home")
    settings = fb.settings.model_copy(update={"home": home})
    return SimpleNamespace(home=home, settings=settings, client=_app(settings, fb.pipeline), orbit=fb.orbit)


def _chat(c: TestClient, question: str, key: str, **extra: Any) -> dict[str, Any]:
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": question}], **extra}, headers=_h(key))
    assert r.status_code == 200, r.text
    return r.json()


def _rows(settings: Settings, query: str) -> list[Any]:
    return [v for v in FeedbackStore(settings.feedback_path).votes() if v.vote.query == query]


def test_chat_feedback_by_completion_id_counts_for_its_question_and_sources(chat_fb):
    c, question = chat_fb.client, "How do I create a workspace in Orbit?"
    done = _chat(c, question, "orbit")
    cid, sources = done["id"], [s["doc_id"] for s in done["fedqa"]["sources"]]
    assert cid.startswith("chatcmpl-") and len(sources) >= 2, done["fedqa"]
    quoted = sources[done["fedqa"]["citations"][0] - 1] if done["fedqa"]["citations"] else sources[0]

    r = c.post("/feedback", json={"completion_id": cid, "rating": "up"}, headers=_h("orbit"))  # the answer's passage answered it
    assert r.status_code == 202, r.text
    assert (r.json()["query"], r.json()["doc_id"], r.json()["not_covered"]) == (question, quoted, False)
    r = c.post("/feedback", json={"completion_id": cid, "rating": "down", "doc_id": sources[1], "comment": "not this one"}, headers=_h("orbit"))
    assert r.status_code == 202, r.text
    stored = {v.vote.doc_id: v.vote for v in _rows(chat_fb.settings, question)}
    assert {d: (v.rating, v.key_name, v.key_products, v.trusted, v.domain) for d, v in stored.items()} == {
        quoted: ("up", "orbit team", ("orbit",), False, "orbit"),
        sources[1]: ("down", "orbit team", ("orbit",), False, "orbit"),
    }
    assert stored[sources[1]].comment == "not this one"

    other = next(p for p in chat_fb.orbit if p not in sources)
    cases = [
        ({"completion_id": cid, "rating": "up", "doc_id": other}, "orbit", 422),  # not one of the completion's sources
        ({"completion_id": cid, "query": question, "rating": "up"}, "orbit", 422),  # one of the two
        ({"completion_id": cid, "rating": "up"}, "orbit2", 404),  # another key's completion
        ({"completion_id": "chatcmpl-" + "0" * 32, "rating": "up"}, "orbit", 404),  # unknown
    ]
    for body, key, status in cases:
        r = c.post("/feedback", json=body, headers=_h(key))
        assert r.status_code == status, (body, key, r.text)
    assert "completion" in r.json()["detail"]
    expired = _app(chat_fb.settings.model_copy(update={"feedback_keep_days": 1e-9}), chat_fb.client.app.state.fedqa.pipeline)
    r = expired.post("/feedback", json={"completion_id": cid, "rating": "up"}, headers=_h("orbit"))
    assert r.status_code == 404 and "expired" in r.json()["detail"], r.text

    # a streamed completion's id is kept too (its chunks carry it)
    with c.stream(
        "POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": question}], "stream": True}, headers=_h("orbit2")
    ) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    streamed = chunks[-1]["id"]
    assert streamed != cid and {ch["id"] for ch in chunks} == {streamed}
    r = c.post("/feedback", json={"completion_id": streamed, "rating": "down"}, headers=_h("orbit2"))
    assert r.status_code == 202 and r.json()["query"] == question, r.text
    assert ("orbit team 2", "down") in {(v.vote.key_name, v.vote.rating) for v in _rows(chat_fb.settings, question)}


def test_chat_feedback_on_a_not_covered_completion_agrees_or_disagrees(chat_fb):
    c = chat_fb.client
    refused = next((d for d in (_chat(c, q, "orbit") for q in OFF_TOPIC) if d["fedqa"]["answer_mode"] == "not_covered"), None)
    assert refused is not None, "no off-topic question was answered not_covered"
    question = refused["fedqa"]["retrieval_query"]
    r = c.post("/feedback", json={"completion_id": refused["id"], "rating": "up"}, headers=_h("orbit"))  # right: not covered
    assert r.status_code == 202 and r.json()["not_covered"] is True and r.json()["doc_id"] is None, r.text
    [row] = _rows(chat_fb.settings, question)
    assert (row.vote.not_covered, row.vote.rating, row.vote.doc_id) == (True, None, None)
    r = c.post("/feedback", json={"completion_id": refused["id"], "rating": "down"}, headers=_h("orbit"))  # wrong: it is covered
    assert r.status_code == 202 and r.json()["not_covered"] is False, r.text
    [row] = _rows(chat_fb.settings, question)  # the key's word replaced
    assert (row.vote.not_covered, row.vote.rating, row.vote.doc_id) == (False, "down", None)
    r = c.get("/admin/feedback", headers=_h("admin"))
    [item] = [q for q in r.json()["questions"] if q["query"] == question]
    assert (item["covered_keys"], item["down_keys"], item["not_covered_keys"]) == (1, 1, 0)


def test_a_curator_confirms_the_right_passage_or_not_covered_over_http_and_from_the_cli(chat_fb, demo_home, tmp_path, capsys):
    c, (wrong, right, _) = chat_fb.client, chat_fb.orbit
    question = "Where do I change my workspace's billing plan?"
    assert c.post("/feedback", json={"query": question, "rating": "down", "doc_id": wrong}, headers=_h("orbit")).status_code == 202
    queue = {q["query"]: q for q in c.get("/admin/feedback", headers=_h("admin")).json()["questions"]}
    qid = queue[question]["id"]
    assert qid.startswith("feedback-") and queue[question]["confirmed"] is False

    cases = [
        ({"id": qid, "doc_ids": [right]}, "orbit", 403),  # not an admin key
        ({"id": "feedback-000000000000", "doc_ids": [right]}, "admin", 404),
        ({"id": qid, "doc_ids": ["orbit/no-such-page#000"]}, "admin", 422),
        ({"id": qid, "doc_ids": [right], "not_covered": True}, "admin", 422),  # one verdict
        ({"id": qid, "query": question, "not_covered": True}, "admin", 422),
    ]
    for body, key, status in cases:
        r = c.post("/admin/feedback/confirm", json=body, headers=_h(key))
        assert r.status_code == status, (body, key, r.text)
    r = c.post("/admin/feedback/confirm", json={"id": qid, "doc_ids": [right]}, headers=_h("admin"))
    assert r.status_code == 200, r.text
    assert (r.json()["id"], r.json()["query"], r.json()["doc_ids"]) == (qid, question, [right])
    queue = {q["query"]: q for q in c.get("/admin/feedback", headers=_h("admin")).json()["questions"]}
    assert queue[question]["confirmed_doc_ids"] == [right]  # still listed: an ordinary key rated a passage down
    r = c.post("/admin/feedback/confirm", json={"query": question, "not_covered": True}, headers=_h("admin"))
    assert r.status_code == 200, r.text
    item = {q["query"]: q for q in c.get("/admin/feedback", headers=_h("admin")).json()["questions"]}[question]
    assert (item["confirmed_doc_ids"], item["not_covered_confirmed"]) == ([], True)  # the admin's earlier word replaced

    # The CLI on a home with the demo index (a copy) and this feedback: confirm by id, then by question.
    from service.files import copytree_sparse

    home = copytree_sparse(demo_home, tmp_path / "home")
    shutil.rmtree(home / "feedback", ignore_errors=True)  # what other tests' chats kept in the shared demo home
    (home / "feedback").mkdir()
    for f in chat_fb.settings.feedback_path.parent.iterdir():
        (home / "feedback" / f.name).write_bytes(f.read_bytes())
    assert _cli(home, "feedback", "confirm", "--id", qid, "--doc-id", right, "--doc-id", wrong) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["id"], out["query"], out["doc_ids"], out["not_covered"]) == (qid, question, [right, wrong], False)
    rows = [v.vote for v in FeedbackStore(home / "feedback" / "feedback.sqlite").votes() if v.vote.key_name == "cli:cli"]
    assert sorted((v.doc_id, v.rating, v.trusted, v.domain) for v in rows) == sorted([(right, "up", True, "orbit"), (wrong, "up", True, "orbit")])
    assert _cli(home, "feedback", "confirm", "--query", question, "--not-covered", "--curator", "ana") == 0
    capsys.readouterr()
    store = FeedbackStore(home / "feedback" / "feedback.sqlite")
    assert [(v.vote.not_covered, v.vote.trusted) for v in store.votes() if v.vote.key_name == "cli:ana"] == [(True, True)]
    assert _cli(home, "feedback", "confirm", "--id", qid, "--doc-id", "orbit/no-such-page#000") == 2
    assert "no passage of the index" in capsys.readouterr().err
    assert _cli(home, "feedback", "confirm", "--id", "feedback-000000000000", "--not-covered") == 2
    assert _cli(home, "feedback", "list") == 0
    assert qid in capsys.readouterr().out


def test_kept_chat_completions_are_bounded_by_age_and_per_key(tmp_path):
    from service.feedback.store import Completion
    from service.generation.modes import AnswerMode

    store, bounds = FeedbackStore(tmp_path / "f.sqlite"), FeedbackBounds(keep_days=1.0, max_per_key=2)

    def completion(key: str, n: int) -> Completion:
        return Completion(f"chatcmpl-{key}{n}", key, None, "v1", f"question {n}", AnswerMode.EXTRACTIVE, ("orbit/a#000",), "orbit/a#000")

    t0 = 1_700_000_000.0
    for n in range(3):
        store.remember(completion("a", n), bounds, now=t0 + n)
    store.remember(completion("b", 0), bounds, now=t0 + 3)
    assert [store.completion(f"chatcmpl-a{n}") is not None for n in range(3)] == [False, True, True]  # a's newest 2
    assert store.completion("chatcmpl-a2") == completion("a", 2)
    assert store.completion("chatcmpl-b0", bounds, now=t0 + 86400 + 2.5) is not None
    assert store.completion("chatcmpl-a1", bounds, now=t0 + 86400 + 2.5) is None  # expired for reads at once
    store.remember(completion("b", 1), bounds, now=t0 + 86400 + 2.5)  # and deleted by the next write
    assert [store.completion(c) is not None for c in ("chatcmpl-a1", "chatcmpl-a2", "chatcmpl-b0", "chatcmpl-b1")] == [False, False, True, True]
