"""Keys, admin key, rate limit, body size limit, CORS, and keys never reaching the log."""

from __future__ import annotations

import io
import json
import logging

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.security import require_admin
from service.api.state import ServiceState
from service.logs import RedactFilter, configure_logging
from tests.conftest import make_settings

Q = {"query": "How do refunds work?", "generate": False}


def _app(pipeline, **overrides):
    settings = make_settings(pipeline.settings.home_dir, **overrides)
    state = ServiceState(settings)
    state.pipeline = pipeline
    app = create_app(settings, state)

    # A second admin route that changes nothing, so the admin check is tested on a harmless call too.
    @app.post("/admin/ping", dependencies=[Depends(require_admin)])
    def ping() -> dict:
        return {"ok": True}

    return app


def _client(pipeline, **overrides) -> TestClient:
    return TestClient(_app(pipeline, **overrides))  # no lifespan: the shared pipeline stays open


def test_401_without_a_key_and_with_a_wrong_one(demo_pipeline):
    c = _client(demo_pipeline, api_keys="k1,k2")
    r = c.post("/ask", json=Q)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "API key" in r.json()["detail"]
    assert c.post("/ask", json=Q, headers={"X-API-Key": "k3"}).status_code == 401
    assert c.post("/ask", json=Q, headers={"Authorization": "Basic k1"}).status_code == 401
    assert c.post("/ask", json=Q, headers={"Authorization": "Bearer k1"}).status_code == 200
    assert c.post("/ask", json=Q, headers={"X-API-Key": "k2"}).status_code == 200
    for open_path in ("/healthz", "/readyz", "/metrics"):
        assert c.get(open_path).status_code == 200


def test_admin_routes_refuse_a_normal_key(demo_pipeline):
    app = _app(demo_pipeline, api_keys="user-key", admin_key="admin-key")
    c = TestClient(app)
    paths = app.openapi()["paths"]
    admin_routes = sorted((m, p) for p in paths if p.startswith("/admin") for m in paths[p])  # included routers too
    assert {("post", "/admin/ping"), ("post", "/admin/reload"), ("get", "/admin/feedback")} <= set(admin_routes)
    for method, path in admin_routes:
        assert c.request(method, path).status_code == 401, path
        r = c.request(method, path, headers={"Authorization": "Bearer user-key"})
        assert r.status_code == 403 and "admin" in r.json()["detail"], path
    assert c.post("/admin/ping", headers={"X-API-Key": "admin-key"}).json() == {"ok": True}


def test_admin_routes_closed_without_an_admin_key(demo_pipeline):
    c = _client(demo_pipeline, api_keys="user-key")
    assert c.post("/admin/ping", headers={"X-API-Key": "user-key"}).status_code == 403


def test_429_over_the_rate_limit_per_key(demo_pipeline):
    c = _client(demo_pipeline, api_keys="k1,k2", rate_limit_per_minute=3)
    k1, k2 = {"X-API-Key": "k1"}, {"Authorization": "Bearer k2"}
    assert [c.post("/ask", json=Q, headers=k1).status_code for _ in range(3)] == [200, 200, 200]
    r = c.post("/ask", json=Q, headers=k1)
    assert r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert "rate limit" in r.json()["detail"]
    assert c.post("/ask", json=Q, headers=k2).status_code == 200  # other keys have their own budget
    assert c.post("/ask", json=Q).status_code == 401  # no key: refused before it counts
    assert c.get("/healthz").status_code == 200  # probes are never limited
    metrics = c.get("/metrics").text
    assert 'fedqa_http_rejected_total{reason="rate_limited"} 1.0' in metrics
    assert 'fedqa_http_requests_total{method="POST",route="/ask",status="429"} 1.0' in metrics


def test_rate_limit_per_client_when_keys_are_off(demo_pipeline):
    c = _client(demo_pipeline, rate_limit_per_minute=2)
    assert [c.post("/ask", json=Q).status_code for _ in range(3)] == [200, 200, 429]


def test_rate_limit_zero_means_no_limit(demo_pipeline):
    c = _client(demo_pipeline, rate_limit_per_minute=0)
    assert {c.post("/ask", json=Q).status_code for _ in range(5)} == {200}


def test_413_for_a_body_over_the_limit(demo_pipeline):
    c = _client(demo_pipeline, max_body_bytes=2048)
    big = {"query": "x" * 3000, "generate": False}
    r = c.post("/ask", json=big)
    assert r.status_code == 413 and "FEDQA_MAX_BODY_BYTES" in r.json()["detail"]
    assert r.headers["x-request-id"]

    def chunks():  # no Content-Length: the limit applies while the body streams in
        for _ in range(4):
            yield b" " * 1000

    r = c.post("/ask", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert c.post("/ask", json=Q).status_code == 200
    assert 'fedqa_http_rejected_total{reason="body_too_large"} 2.0' in c.get("/metrics").text


def test_cors_off_by_default_and_on_for_configured_origins(demo_pipeline):
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    off = _client(demo_pipeline)
    r = off.options("/ask", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in off.post("/ask", json=Q, headers={"Origin": "https://app.example"}).headers

    on = _client(demo_pipeline, cors_origins="https://app.example, https://other.example")
    r = on.options("/ask", headers={**preflight, "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    r = on.post("/ask", json=Q, headers={"Origin": "https://app.example"})
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
    evil = on.options("/ask", headers={**preflight, "Origin": "https://evil.example"})
    assert evil.headers.get("access-control-allow-origin") != "https://evil.example"


def test_keys_never_appear_in_logs(demo_pipeline, caplog):
    secret, admin = "sk-live-4f1b2c9d8e7a6b5c", "adm-9a8b7c6d5e4f3a2b"
    c = _client(demo_pipeline, api_keys=secret, admin_key=admin, rate_limit_per_minute=2)
    caplog.set_level(logging.DEBUG)
    c.post("/ask", json=Q, headers={"Authorization": f"Bearer {secret}"})
    c.post("/ask", json=Q, headers={"X-API-Key": secret})
    c.post("/ask", json=Q, headers={"X-API-Key": secret})  # 429
    c.post("/ask", json=Q, headers={"X-API-Key": secret + "x"})  # 401
    c.post("/admin/ping", headers={"X-API-Key": secret})  # 403
    c.post("/admin/ping", headers={"Authorization": f"Bearer {admin}"})
    assert caplog.records, "the access log should have recorded the requests"
    for rec in caplog.records:
        text = rec.getMessage() + json.dumps({k: str(v) for k, v in vars(rec).items()})
        assert secret not in text and admin not in text


def test_json_log_lines_carry_the_request_id(demo_pipeline):
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        configure_logging("json", "INFO", secrets=["sk-abc123"], stream=stream)
        c = _client(demo_pipeline)
        r = c.post("/ask", json=Q, headers={"X-Request-ID": "trace-42"})
        assert r.headers["x-request-id"] == "trace-42"
        logging.getLogger("fedqa.test").info("leaked Authorization: Bearer sk-abc123 and api_key=zzz")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    access = [x for x in lines if x["logger"] == "fedqa.access"]
    assert access and access[-1]["request_id"] == "trace-42"
    assert access[-1]["route"] == "/ask" and access[-1]["status"] == 200 and access[-1]["duration_ms"] > 0
    assert {"time", "level", "message"} <= set(access[-1])
    leaked = [x for x in lines if x["logger"] == "fedqa.test"][0]["message"]
    assert "sk-abc123" not in leaked and "zzz" not in leaked and "[redacted]" in leaked


def test_request_id_generated_echoed_or_replaced(client_open):
    r = client_open.get("/healthz")
    assert len(r.headers["x-request-id"]) == 32
    assert client_open.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"
    weird = client_open.get("/healthz", headers={"X-Request-ID": "no spaces <script>" + "x" * 200})
    assert weird.headers["x-request-id"] != "no spaces <script>" and len(weird.headers["x-request-id"]) == 32


def test_redact_filter_scrubs_known_secrets_and_patterns():
    f = RedactFilter(["topsecret"])
    assert f.scrub("key topsecret here") == "key [redacted] here"
    assert "tok" not in f.scrub("Authorization: Bearer tok")
    assert f.scrub('{"x-api-key": "abc"}') == '{"x-api-key": "[redacted]"}'


@pytest.fixture
def client_open(demo_pipeline) -> TestClient:
    return _client(demo_pipeline)
