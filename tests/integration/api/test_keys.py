"""Keys that see only their products (FEDQA_API_KEYS_FILE), over a real uvicorn server on every route, streams
and chat included; the keys file re-read on /admin/reload; per-key rate limits; failed authentications limited
per client address (fault 12).

A key limited to one product asks about every product: no response, stream, error, job, report, listing or
metric names another product (as a key, a domain, a doc id, a source path, a search timing or a summary group).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from service.demo import QUERIES
from tests.utils import make_settings, pipeline_with, present, served_app

PRODUCTS = ("orbit", "relay", "ledger", "beacon")
HIDDEN = ("relay", "ledger", "beacon")  # what the orbit key may not see
KEYS = {
    "orbit": "k-orbit-only",
    "orbit2": "k-orbit-too",
    "pair": "k-orbit-relay",
    "ghost": "k-orbit-ghost",
    "all": "k-everything",
    "ops": "k-ops",
    "boss": "k-boss",
    "slow": "k-slow",
}
LEGACY, ADMIN = "legacy-env-key", "admin-env-key"
STRATEGIES = ("fused", "mkpqa", "uis", "rfs", "lfs")


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _entries() -> list[dict[str, Any]]:
    return [
        {"name": "orbit team", "key_sha256": _sha(KEYS["orbit"]), "domains": ["orbit"]},
        {"name": "another orbit team", "key_sha256": _sha(KEYS["orbit2"]), "domains": ["orbit"]},
        {"name": "orbit and relay", "key_sha256": _sha(KEYS["pair"]), "domains": ["orbit", "relay"], "admin": False},
        {"name": "orbit and a product not indexed", "key_sha256": _sha(KEYS["ghost"]).upper(), "domains": ["orbit", "ghost"]},
        {"name": "everything", "key_sha256": _sha(KEYS["all"]), "domains": "*"},
        {"name": "operations", "key_sha256": _sha(KEYS["ops"]), "domains": ["beacon"], "admin": True},
        {"name": "administrator", "key_sha256": _sha(KEYS["boss"]), "domains": "*", "admin": True},
        {"name": "slow", "key_sha256": _sha(KEYS["slow"]), "domains": ["ledger"], "rate_limit_per_minute": 2},
    ]


def _questions() -> list[dict[str, Any]]:
    """Two questions of every product and two crossing products, from the demo's labelled questions."""
    qs = [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for p in PRODUCTS:
        out += [q for q in qs if q["domains"] == [p]][:2]
    return out + [q for q in qs if len(q["domains"]) > 1][:2]


def _named(s: str) -> str | None:
    """The product a string names as an identifier: ``relay``, ``relay/page#003``, ``search.relay``, ``domain:relay``."""
    for prefix in ("search.", "domain:", ""):
        if s.startswith(prefix):
            head = s[len(prefix) :].split("/")[0].split("#")[0]
            if head in PRODUCTS:
                return head
    return None


def leaks(obj: Any, hidden: tuple[str, ...] = HIDDEN, path: str = "$") -> list[str]:
    """Every place a JSON document names a hidden product (as a key or a value)."""
    found: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if _named(str(k)) in hidden:
                found.append(f"{path} key {k!r}")
            found += leaks(v, hidden, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += leaks(v, hidden, f"{path}[{i}]")
    elif isinstance(obj, str) and _named(obj) in hidden:
        found.append(f"{path} = {obj!r}")
    return found


def _sse(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        name = next((x[7:] for x in lines if x.startswith("event: ")), "message")
        data = [x[6:] for x in lines if x.startswith("data: ")]
        if data:
            events.append((name, data[0] if data[0] == "[DONE]" else json.loads("\n".join(data))))
    return events


def _client(url: str, key: str | None = None, **kw: Any) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"} if key else {}, **kw)


@pytest.fixture(scope="module")
def server(demo_pipeline, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The app with a keys file, FEDQA_API_KEYS and an admin key, under uvicorn; jobs go to a home of its own."""
    home = tmp_path_factory.mktemp("keys-home")
    keys_file = home / "keys.json"
    keys_file.write_text(json.dumps(_entries()), encoding="utf-8")
    settings = make_settings(home, api_keys_file=keys_file, api_keys=LEGACY, admin_key=ADMIN, rate_limit_per_minute=0, auth_failures_per_minute=0)
    state = ServiceState(settings, loader=lambda *a, **k: pipeline_with(demo_pipeline))
    state.pipeline = pipeline_with(demo_pipeline)
    app = create_app(settings, state)
    with served_app(app) as url:
        yield SimpleNamespace(url=url, keys_file=keys_file, app=app)
        worker = getattr(app.state, "eval_worker", None)
        if worker is not None:
            worker.stop()


def _assert_orbit_only(body: dict[str, Any]) -> None:
    assert not leaks(body), leaks(body)
    assert {s["domain"] for s in body["sources"]} <= {"orbit"} and body["sources"]
    routing = body["routing"]
    assert routing["scope"] == ["orbit"] and list(routing["probabilities"]) == ["orbit"]
    assert set(routing["active_domains"]) == {"orbit"} and set(routing["activation"]) <= {"orbit"}


def test_a_key_of_one_product_gets_only_that_product_on_ask(server):
    """Every product's questions with every strategy, retrieval only and answered: only orbit's passages, and
    routing over orbit alone, with the router's own p_orbit (independent probabilities: restricted, not rescaled)."""
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url, LEGACY) as legacy:
        for q in _questions():
            for strategy in STRATEGIES:
                r = orbit.post("/ask", json={"query": q["query"], "strategy": strategy, "generate": False})
                assert r.status_code == 200, r.text
                _assert_orbit_only(r.json())
            full = legacy.post("/ask", json={"query": q["query"], "generate": False}).json()["routing"]
            assert set(full["probabilities"]) == set(PRODUCTS) and full["scope"] is None
            scoped = orbit.post("/ask", json={"query": q["query"], "generate": False}).json()["routing"]
            assert scoped["probabilities"]["orbit"] == pytest.approx(full["probabilities"]["orbit"])
        answered = orbit.post("/ask", json={"query": _questions()[2]["query"], "generate": True}).json()  # a relay question
        _assert_orbit_only(answered)
        several = "How do I import contacts from a spreadsheet? And, how do I create a help desk ticket by email?"
        _assert_orbit_only(orbit.post("/ask", json={"query": several, "generate": False}).json())


def test_the_not_covered_evidence_of_a_key_counts_the_words_of_its_products_only(server):
    """Issue 50, fault 4: rare_word and uncovered read the whole index's word counts, so an orbit-only key learned
    that "dunning" is in 15 passages of another product (rare_word 1/(1+15)). Now a limited key's evidence (and its
    decision) reads its products' counts: no orbit passage names dunning."""
    question = {"query": "What is dunning?", "generate": True}
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url, KEYS["all"]) as everything:
        limited = orbit.post("/ask", json=question).json()
        full = everything.post("/ask", json=question).json()
    _assert_orbit_only(limited)
    assert full["confidence"]["evidence"]["rare_word"] == pytest.approx(1 / 16)  # the whole index: 15 ledger passages
    assert limited["confidence"]["evidence"]["rare_word"] == 1.0, "the orbit key learned ledger's word counts"
    assert limited["confidence"]["evidence"]["uncovered"] == 1.0  # its one specific word is in no orbit passage


def test_streams_and_chat_stay_within_the_key_products(server):
    with _client(server.url, KEYS["orbit"]) as orbit:
        for q in _questions()[2:8:2]:  # a relay, a ledger and a beacon question
            r = orbit.post("/ask", json={"query": q["query"], "stream": True})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = _sse(r.text)
            assert [n for n, _ in events][0] == "retrieval" and events[-1][0] == "done"
            assert not leaks([d for _, d in events])
            assert {s["domain"] for s in events[0][1]["sources"]} == {"orbit"}
            _assert_orbit_only(events[-1][1])

            messages = [{"role": "user", "content": "I use the help desk."}, {"role": "user", "content": q["query"]}]
            chat = orbit.post("/v1/chat/completions", json={"messages": messages})
            assert chat.status_code == 200
            _assert_orbit_only(chat.json()["fedqa"])
            streamed = orbit.post("/v1/chat/completions", json={"messages": messages, "stream": True, "strategy": "uis"})
            chunks = [d for _, d in _sse(streamed.text)]
            assert chunks[-1] == "[DONE]" and not leaks(chunks)
            _assert_orbit_only(chunks[-2]["fedqa"])


def test_domains_outside_the_key_are_403_naming_the_field(server):
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url, KEYS["ghost"]) as ghost:
        for domains in (["relay"], ["orbit", "ledger"], ["no-such-product"]):
            for path, body in (
                ("/ask", {"query": "How do I reset my password?", "domains": domains}),
                ("/ask", {"query": "How do I reset my password?", "domains": domains, "stream": True}),
                ("/evaluate", {"queries": [{"query": "How do I reset my password?"}], "domains": domains, "dry_run": True}),
            ):
                r = orbit.post(path, json=body)
                assert r.status_code == 403, (path, domains, r.text)
                detail = r.json()["detail"]
                assert detail.startswith("domains: ") and r.json()["errors"][0]["loc"] == ["body", "domains"]
                assert not [p for p in HIDDEN if p in detail and p not in domains], detail  # names only what was asked
        ok = orbit.post("/ask", json={"query": "How do I reset my password?", "domains": ["orbit"], "generate": False})
        assert ok.status_code == 200 and {s["domain"] for s in ok.json()["sources"]} == {"orbit"}
        # A product of the key that the index lacks: 422 listing only the key's products in the index.
        r = ghost.post("/ask", json={"query": "How do I reset my password?", "domains": ["ghost"], "generate": False})
        assert r.status_code == 422 and "['orbit']" in r.json()["detail"] and not leaks(r.json())


def test_domains_readyz_and_metrics_show_products_only_to_who_may_see_them(server):
    with _client(server.url, KEYS["pair"]) as pair, _client(server.url, KEYS["all"]) as everything, _client(server.url) as anon:
        assert sorted(d["name"] for d in pair.get("/domains").json()["domains"]) == ["orbit", "relay"]
        assert sorted(d["name"] for d in everything.get("/domains").json()["domains"]) == sorted(PRODUCTS)
        assert anon.get("/domains").status_code == 401  # keys are on: no listing without one

        assert anon.get("/readyz").json() == {"status": "ready"}  # the probe's status, nothing that names a product
        assert pair.get("/readyz").json() == {"status": "ready"}
        assert "versions" in everything.get("/readyz").json()

        pair.post("/ask", json={"query": "How do I reset my password?", "generate": False})
        assert anon.get("/metrics").status_code == 401
        assert pair.get("/metrics").status_code == 403
        text = everything.get("/metrics").text
        assert "fedqa_domain_search_seconds" in text
        with _client(server.url, KEYS["ops"]) as ops:  # an admin key limited to one product may read them too
            assert ops.get("/metrics").status_code == 200


def test_evaluation_jobs_stay_within_the_key_products(server):
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url, LEGACY) as legacy:
        dry = orbit.post("/evaluate", json={"dataset": "demo", "strategies": ["lfs", "uis"], "dry_run": True}).json()
        assert dry["plan"]["llm_calls"]["lfs_selection"] == dry["plan"]["questions"]  # one product: one vote a question
        r = orbit.post("/evaluate", json={"dataset": "demo", "strategies": ["fused", "rfs"], "limit": 12})
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["spec"]["scope"] == ["orbit"]
        inline = [{"query": q["query"], "domains": q["domains"]} for q in _questions()]
        theirs = legacy.post("/evaluate", json={"queries": inline, "strategies": ["uis"]})
        assert theirs.status_code == 202
        for client, job_id in ((orbit, job["id"]), (legacy, theirs.json()["id"])):
            deadline = time.monotonic() + 180
            while client.get(f"/evaluate/{job_id}").json()["status"] not in ("done", "failed") and time.monotonic() < deadline:
                time.sleep(0.1)
        done = orbit.get(f"/evaluate/{job['id']}").json()
        assert done["status"] == "done" and not leaks(done)
        records = orbit.get(f"/evaluate/{job['id']}/questions").json()["records"]
        assert records and not leaks(records)
        assert all(set(r["domains"]) <= {"orbit"} for r in records)  # the dataset's questions of orbit alone
        report = orbit.get(f"/evaluate/{job['id']}/report").text
        assert not [p for p in HIDDEN if f">{p}<" in report or f"{p}/" in report]
        # The job of a key that sees everything is not the orbit key's to see; the orbit key's job is visible to it.
        assert [j["id"] for j in orbit.get("/evaluate").json()["jobs"]] == [job["id"]]
        other = theirs.json()["id"]
        for path in (f"/evaluate/{other}", f"/evaluate/{other}/questions", f"/evaluate/{other}/report"):
            assert orbit.get(path).status_code == 404
        assert orbit.delete(f"/evaluate/{other}").status_code == 404
        assert other in {j["id"] for j in legacy.get("/evaluate").json()["jobs"]}
        with _client(server.url, KEYS["boss"]) as boss:  # an admin key that sees every product sees both
            assert {job["id"], other} <= {j["id"] for j in boss.get("/evaluate").json()["jobs"]}


def test_a_job_is_its_creators_and_an_admins_only(server):
    """Issue 50, fault 5: a second key of the same products listed, read (its questions too) and cancelled another
    key's job. Now only the key that created a job, or an admin key, sees and cancels it; others get 404 (as for a
    job that does not exist), and nothing about the job changes."""
    question = {"query": "How do I reset my password?", "domains": ["orbit"]}
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url, KEYS["orbit2"]) as other, _client(server.url, KEYS["boss"]) as boss:
        mine = orbit.post("/evaluate", json={"queries": [question] * 3, "strategies": ["uis"], "metrics": ["retrieval"]})
        assert mine.status_code == 202, mine.text
        job_id = mine.json()["id"]
        deadline = time.monotonic() + 180
        while orbit.get(f"/evaluate/{job_id}").json()["status"] != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job_id not in {j["id"] for j in other.get("/evaluate").json()["jobs"]}
        for path in (f"/evaluate/{job_id}", f"/evaluate/{job_id}/questions", f"/evaluate/{job_id}/report"):
            assert other.get(path).status_code == 404, path
            assert orbit.get(path).status_code == 200, path
            assert boss.get(path).status_code == 200, path
        assert other.delete(f"/evaluate/{job_id}").status_code == 404
        listed = [j for j in orbit.get("/evaluate").json()["jobs"] if j["id"] == job_id]
        assert len(listed) == 1 and "client" not in listed[0]  # who made it is not handed out
        assert job_id in {j["id"] for j in boss.get("/evaluate").json()["jobs"]}

        queued = other.post("/evaluate", json={"queries": [question] * 40, "strategies": ["uis", "mkpqa"], "metrics": ["retrieval"]})
        assert queued.status_code == 202, queued.text
        theirs = queued.json()["id"]
        assert orbit.delete(f"/evaluate/{theirs}").status_code == 404
        assert other.get(f"/evaluate/{theirs}").json()["status"] in ("queued", "running", "done")  # not cancelled by orbit
        cancelled = boss.delete(f"/evaluate/{theirs}")  # an admin may cancel any key's job
        assert cancelled.status_code == 200 and cancelled.json()["status"] in ("cancelled", "done")


def test_every_route_of_the_app_keeps_the_key_within_its_products(server):
    """Every route the app serves, read from the app itself (a route added later is swept too), called with the
    orbit key about other products: no response names a hidden product, none is a 500; without a key every route
    that serves data answers 401 (a wrong key: 401, or 403 on /metrics, which never says whether a key exists)."""
    import re

    from fastapi.routing import APIRoute

    relay = _questions()[2]["query"]
    bodies: dict[str, Any] = {
        "/ask": {"query": relay, "generate": False, "strategy": "uis"},
        "/v1/chat/completions": {"messages": [{"role": "user", "content": relay}], "strategy": "uis"},
        "/evaluate": {"dataset": "demo", "strategies": ["uis", "lfs"], "dry_run": True},
    }
    open_routes = {"/healthz", "/readyz", "/", "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"}

    def api_routes(routes: list[Any]) -> list[APIRoute]:  # FastAPI 0.165 wraps each included router in one entry
        inner = [api_routes(r.original_router.routes) if hasattr(r, "original_router") else [r] for r in routes]
        return [r for rs in inner for r in rs if isinstance(r, APIRoute)]

    routes = sorted({(m, r.path) for r in api_routes(server.app.routes) for m in present(r.methods) if m != "HEAD"})
    assert {("POST", "/ask"), ("POST", "/v1/chat/completions"), ("GET", "/domains"), ("GET", "/metrics")} <= set(routes)
    swept = []
    with _client(server.url, KEYS["orbit"]) as orbit, _client(server.url) as anon, _client(server.url, "not-a-key") as wrong:
        for method, path in routes:
            url = path.replace("{job_id}", "no-such-job")
            r = orbit.request(method, url, json=bodies.get(path))
            assert r.status_code < 500, (method, path, r.status_code, r.text[:500])
            if path in (*bodies, "/domains", "/v1/models") or (method, path) == ("GET", "/evaluate"):
                assert r.status_code == 200, (method, path, r.status_code, r.text[:500])  # the key is served, within orbit
            if "json" in r.headers.get("content-type", ""):
                assert not leaks(r.json()), (method, path, leaks(r.json()))
            else:  # HTML, text: no hidden product as a doc path, a quoted name or an element's text
                assert not [p for p in HIDDEN if re.search(rf'{p}/|"{p}"|>{p}<', r.text)], (method, path)
            if path not in open_routes:  # /metrics: 403 for a key that does not see every product, a wrong one too
                assert anon.request(method, url, json=bodies.get(path)).status_code == 401, (method, path)
                assert wrong.request(method, url, json=bodies.get(path)).status_code in (401, 403), (method, path)
            swept.append(f"{method} {path}")
    assert len(swept) == len(routes) >= 12, swept


def test_per_key_rate_limit(server):
    with _client(server.url, KEYS["slow"]) as slow, _client(server.url, KEYS["all"]) as other:
        body = {"query": "How do I refund an invoice?", "generate": False}
        assert [slow.post("/ask", json=body).status_code for _ in range(3)] == [200, 200, 429]
        assert other.post("/ask", json=body).status_code == 200  # the service's limit (none) for the others


def test_keys_file_is_reread_on_admin_reload(server):
    fresh = "k-added-later"
    with _client(server.url, fresh) as late, _client(server.url, ADMIN) as admin, _client(server.url, KEYS["orbit"]) as orbit:
        assert late.get("/domains").status_code == 401
        server.keys_file.write_text(json.dumps([*_entries(), {"name": "late", "key_sha256": _sha(fresh), "domains": ["beacon"]}]), encoding="utf-8")
        assert late.get("/domains").status_code == 401  # read once, until a reload
        r = admin.post("/admin/reload")
        assert r.status_code == 200 and r.json()["keys"] == len(_entries()) + 1 + 2  # the file's (one more now), FEDQA_API_KEYS, FEDQA_ADMIN_KEY
        assert [d["name"] for d in late.get("/domains").json()["domains"]] == ["beacon"]
        with _client(server.url, KEYS["ops"]) as ops:  # an admin entry of the file opens the admin routes
            assert ops.post("/admin/reload").status_code == 200
        assert orbit.post("/admin/reload").status_code == 403

        server.keys_file.write_text("[{not json", encoding="utf-8")
        r = admin.post("/admin/reload")
        assert r.status_code == 409 and "keys file" in r.json()["error"]
        assert late.get("/domains").status_code == 200  # the keys read before keep serving
        server.keys_file.write_text(json.dumps(_entries()), encoding="utf-8")
        assert admin.post("/admin/reload").status_code == 200
        assert late.get("/domains").status_code == 401


def test_keys_file_errors_stop_the_service_and_an_empty_file_closes_the_api(tmp_path: Path):
    from service.api.keys import KeysFileError

    path = tmp_path / "keys.json"
    bad = {
        "missing": None,
        "not json": "[{",
        "not a list": json.dumps({"name": "x"}),
        "short digest": json.dumps([{"name": "a", "key_sha256": "abc", "domains": "*"}]),
        "plain key field": json.dumps([{"name": "a", "key": "secret", "key_sha256": _sha("a"), "domains": "*"}]),
        "twice": json.dumps([{"name": "a", "key_sha256": _sha("a"), "domains": "*"}, {"name": "b", "key_sha256": _sha("a"), "domains": "*"}]),
        "no domains": json.dumps([{"name": "a", "key_sha256": _sha("a"), "domains": []}]),
        "admin as text": json.dumps([{"name": "a", "key_sha256": _sha("a"), "domains": "*", "admin": "yes"}]),
    }
    for why, text in bad.items():
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_text(text, encoding="utf-8")
        with pytest.raises(KeysFileError) as err:
            create_app(make_settings(tmp_path, api_keys_file=path))
        assert "keys file" in str(err.value) and _sha("a") not in str(err.value), why

    path.write_text("[]", encoding="utf-8")
    app = create_app(make_settings(tmp_path, api_keys_file=path))
    assert app.state.keys.keyed and not app.state.keys.keys  # a keys file with no key: nothing opens, nothing is open


def test_wrong_keys_from_one_address_get_429(demo_pipeline, tmp_path):
    """Fault 12: wrong keys were never limited (50 tries, 50 x 401). Now the address's wrong keys are refused (429,
    Retry-After) after FEDQA_AUTH_FAILURES_PER_MINUTE of them, on every keyed route, while other addresses and
    missing keys are not counted. Issue 50 fault 8: its right key is never locked out (it was 429 too: behind an
    ingress one guesser locked out every user, the admin and the keyed metrics scrape)."""
    settings = make_settings(tmp_path, api_keys="right-key", admin_key="admin-key", rate_limit_per_minute=0)
    state = ServiceState(settings)
    state.pipeline = pipeline_with(demo_pipeline)
    body = {"query": "How do I reset my password?", "generate": False}
    with served_app(create_app(settings, state)) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert [c.post("/ask", json=body).status_code for _ in range(12)] == [401] * 12  # no key: not a guess
        codes = [c.post("/ask", json=body, headers={"X-API-Key": f"guess-{i}"}).status_code for i in range(50)]
        assert 429 in codes, "50 wrong keys from one address were never limited"
        assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}  # the default: 10 a minute
        r = c.post("/ask", json=body, headers={"X-API-Key": "one-more-guess"})
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60 and "failed authentications" in r.json()["detail"]
        assert c.post("/ask", json=body, headers={"Authorization": "Bearer right-key"}).status_code == 200  # never locked out
        assert c.post("/admin/reload", headers={"X-API-Key": "guess"}).status_code == 429
        assert c.post("/admin/reload", headers={"X-API-Key": "admin-key"}).status_code != 429
        assert 'fedqa_http_rejected_total{reason="auth_failures"}' in c.get("/metrics").text
        with httpx.Client(base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as elsewhere:
            assert elsewhere.post("/ask", json=body, headers={"X-API-Key": "right-key"}).status_code == 200


def test_a_503_names_server_paths_only_to_who_may_see_them(demo_pipeline, tmp_path):
    """Issue 50, fault 12: /readyz hid why the service is not ready from a key of some products, but /ask's 503
    showed it (a model file's path on the server). Now every answering route (and /evaluate, and the jobs database's
    503) gives that key a pointer to the service log; a key that sees every product still reads the cause."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "not-a-dir").write_text("a file where the jobs folder should be", encoding="utf-8")
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(_entries()), encoding="utf-8")
    missing = home / "models" / "router" / "model.onnx"
    settings = make_settings(home, api_keys_file=keys_file, rate_limit_per_minute=0, jobs_db=home / "not-a-dir" / "jobs.sqlite")

    def broken(*_: Any, **__: Any) -> Any:
        raise FileNotFoundError(f"router model {missing} is missing")

    state = ServiceState(settings, loader=broken)
    calls = [
        ("POST", "/ask", {"query": "How do I reset my password?"}),
        ("POST", "/ask", {"query": "How do I reset my password?", "stream": True}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "How do I reset my password?"}]}),
        ("POST", "/evaluate", {"queries": [{"query": "How do I reset my password?", "domains": []}], "metrics": ["retrieval"]}),
        ("GET", "/domains", None),
    ]
    with served_app(create_app(settings, state), lifespan="on") as url:
        with _client(url, KEYS["orbit"]) as orbit, _client(url, KEYS["all"]) as everything:
            for method, path, body in calls:
                limited = orbit.request(method, path, json=body)
                assert limited.status_code == 503, (path, limited.text)
                assert str(tmp_path) not in limited.text and "see the service log" in limited.json()["detail"], (path, limited.text)
                full = everything.request(method, path, json=body)
                assert full.status_code == 503 and str(missing) in full.json()["detail"], (path, full.text)  # operators read the cause
            jobs = orbit.get("/evaluate")
            assert jobs.status_code == 503 and str(tmp_path) not in jobs.text and "FEDQA_JOBS_DB" in jobs.json()["detail"], jobs.text
            assert str(home / "not-a-dir") in everything.get("/evaluate").json()["detail"]
            assert orbit.get("/readyz").json() == {"status": "not ready", "detail": "see the service log"}  # as before


def _limited_server(demo_pipeline: Any, tmp_path: Path, **overrides: Any) -> Any:
    """A keyed app served as ``fedqa serve`` serves it (:func:`service.api.server.server_config`: the proxies it trusts)."""
    settings = make_settings(tmp_path, api_keys="right-key", rate_limit_per_minute=0, **overrides)
    state = ServiceState(settings)
    state.pipeline = pipeline_with(demo_pipeline)
    return served_app(create_app(settings, state), settings=settings)


def test_x_forwarded_for_is_ignored_from_an_untrusted_peer(demo_pipeline, tmp_path):
    """Issue 50 fault 8: uvicorn believed X-Forwarded-For from 127.0.0.1 by default, so a local client that named a
    new address on each request was never limited (50 wrong keys, 50 x 401). Without FEDQA_TRUSTED_PROXIES the TCP
    peer is the client."""
    with _limited_server(demo_pipeline, tmp_path) as url, httpx.Client(base_url=url, timeout=60) as c:
        codes = [c.get("/domains", headers={"X-API-Key": f"guess-{i}", "X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(30)]
        assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}, codes


def test_behind_a_trusted_proxy_clients_are_counted_apart_and_a_wrong_key_from_anywhere_is_limited(demo_pipeline, tmp_path):
    """Issue 50 fault 8: through a trusted proxy one client's guesses lock out neither another client nor a right key;
    one wrong key repeated from ever new addresses (a stale key on many clients, or forged addresses) is limited
    per key (it was never limited)."""
    with _limited_server(demo_pipeline, tmp_path, trusted_proxies="127.0.0.1") as url, httpx.Client(base_url=url, timeout=60) as c:

        def get(key: str, client: str) -> int:
            return c.get("/domains", headers={"X-API-Key": key, "X-Forwarded-For": client}).status_code

        assert [get(f"guess-{i}", "203.0.113.5") for i in range(11)] == [401] * 10 + [429]
        assert get("right-key", "203.0.113.5") == 200
        assert get("another-guess", "203.0.113.6") == 401  # another client of the same proxy: not locked out
        assert get("right-key", "203.0.113.6") == 200
        codes = [get("stale-key", f"198.51.100.{i}") for i in range(20)]
        assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}, codes
