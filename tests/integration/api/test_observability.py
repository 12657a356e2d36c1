"""/metrics: request counts and latency per route template, pipeline stages, active domains, readiness."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.api.app import create_app
from service.api.state import ServiceState
from tests.conftest import make_settings


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_cover_routes_stages_domains_and_readiness(demo_pipeline):
    settings = make_settings(demo_pipeline.settings.home_dir)
    state = ServiceState(settings)
    state.pipeline = demo_pipeline
    c = TestClient(create_app(settings, state))

    for q in ("How do I import contacts?", "How do refunds work?", "rotate api keys"):
        assert c.post("/ask", json={"query": q, "generate": False}).status_code == 200
    assert c.post("/ask", json={"query": "How long do sessions last?"}).status_code == 200  # extractive answer
    # a one-product question (SCIM, asked here before, is in two products' documentation: answered by product, untimed as one generation)
    with c.stream("POST", "/ask", json={"query": "How do I import contacts?", "stream": True}) as r:
        "".join(r.iter_text())
    assert c.post("/ask", json={"query": ""}).status_code == 422
    assert c.get("/no/such/page/12345").status_code == 404
    c.get("/healthz")

    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = _samples(r.text)

    assert _value(s, "fedqa_http_requests_total", method="POST", route="/ask", status="200") == 5
    assert _value(s, "fedqa_http_requests_total", method="POST", route="/ask", status="422") == 1
    assert _value(s, "fedqa_http_requests_total", method="GET", route="<unmatched>", status="404") == 1
    assert _value(s, "fedqa_http_requests_total", method="GET", route="/healthz", status="200") == 1
    assert _value(s, "fedqa_http_request_duration_seconds_count", method="POST", route="/ask") == 6
    assert _value(s, "fedqa_http_request_duration_seconds_bucket", method="POST", route="/ask", le="+Inf") == 6
    assert not any("/no/such/page" in str(k) for k in s)  # raw paths never become labels

    for stage in ("router", "gate", "embed", "search", "total"):
        assert _value(s, "fedqa_stage_seconds_count", stage=stage) == 5, stage
    assert _value(s, "fedqa_stage_seconds_count", stage="generate") == 2  # the full answer and the stream
    per_domain = {k[1][0][1]: v for k, v in s.items() if k[0] == "fedqa_domain_search_seconds_count"}
    assert per_domain and set(per_domain) <= set(demo_pipeline.domains)
    activations = {k[1][0][1]: v for k, v in s.items() if k[0] == "fedqa_domain_activations_total"}
    assert sum(activations.values()) == _value(s, "fedqa_active_domains_sum") >= 5
    assert _value(s, "fedqa_active_domains_count") == 5
    assert _value(s, "fedqa_answers_total", mode="retrieval") == 3
    assert _value(s, "fedqa_answers_total", mode="extractive") == 2

    assert _value(s, "fedqa_http_requests_in_progress") == 1.0  # the scrape itself: every earlier request was counted out
    assert _value(s, "fedqa_ready") == 1.0
    assert _value(s, "fedqa_domains") == len(demo_pipeline.domains)
    info = [dict(k[1]) for k in s if k[0] == "fedqa_pipeline_info"]
    assert info and info[0]["index"] == demo_pipeline.versions["index"]
    assert any(k[0] == "process_resident_memory_bytes" for k in s)


def test_two_apps_keep_separate_registries(demo_pipeline):
    settings = make_settings(demo_pipeline.settings.home_dir)
    a, b = (TestClient(create_app(settings, ServiceState(settings))) for _ in range(2))
    a.get("/healthz")
    sa, sb = _samples(a.get("/metrics").text), _samples(b.get("/metrics").text)
    assert _value(sa, "fedqa_http_requests_total", method="GET", route="/healthz", status="200") == 1
    assert _value(sb, "fedqa_http_requests_total", method="GET", route="/healthz", status="200") == 0
    assert _value(sb, "fedqa_ready") == 0.0  # no pipeline in this state


def test_every_secret_setting_is_blanked_in_the_log(tmp_path):
    """Issue 28, fault 13: FEDQA_JUDGE_API_KEY was not in ``fedqa serve``'s redaction list; now every secret setting is."""
    import io
    import logging

    from service.cli.serve import secrets_of
    from service.config import Settings
    from service.logs import configure_logging

    names = [name for name, field in Settings.model_fields.items() if "SecretStr" in str(field.annotation)]
    assert {"judge_api_key", "llm_api_key", "qdrant_api_key", "admin_key", "api_keys"} <= set(names)
    values: dict[str, Any] = {name: f"s3cr3t-{name}-0123456789" for name in names}
    settings = Settings(home=tmp_path, **values)
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("text", "INFO", secrets=secrets_of(settings), stream=stream)
        for value in values.values():
            logging.getLogger("fedqa.test").info("judge call failed: POST with %s", value)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    text = stream.getvalue()
    assert text.count("[redacted]") == len(values)
    assert not any(value in text for value in values.values()), text
