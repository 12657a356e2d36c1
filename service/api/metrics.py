"""Prometheus metrics (prometheus-client) and ``GET /metrics``.

Each app gets its own :class:`~prometheus_client.CollectorRegistry`, so several apps (tests,
reloads) never clash over metric names. HTTP metrics are labelled by route *template*
(``/ask``, ``/evaluate/{job_id}``), never by raw path, so scans of unknown URLs cannot
blow up the label set (they are counted under ``route="<unmatched>"``).

Per-stage timings come from the ``timings_ms`` every answer carries (the pipeline is not
instrumented twice): routes that answer questions call :func:`record_answer`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from service.api.security import presented_key, sees_everything

UNMATCHED = "<unmatched>"
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Stages of timings_ms that become fedqa_stage_seconds{stage=...}; "search.<domain>" goes to its own histogram.
STAGES = ("router", "gate", "embed", "search", "retrieval", "generate", "total")


class _StateCollector:
    """Readiness and the versions in service, read from the service state at scrape time."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        pipeline = getattr(self.state, "pipeline", None)
        ready = GaugeMetricFamily("fedqa_ready", "1 when an index and the models are loaded (GET /readyz is 200)")
        ready.add_metric([], 1.0 if pipeline is not None else 0.0)
        yield ready
        if pipeline is not None:
            info = InfoMetricFamily("fedqa_pipeline", "Versions of the pipeline in service")
            info.add_metric([], {k: str(v) for k, v in pipeline.versions.items()})
            yield info
            domains = GaugeMetricFamily("fedqa_domains", "Searchable domains of the index in service")
            domains.add_metric([], float(len(pipeline.domains)))
            yield domains


class Metrics:
    """The service's metrics, in a registry of their own."""

    def __init__(self, state: Any = None) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        if state is not None:
            r.register(_StateCollector(state))
        self.requests = Counter("fedqa_http_requests", "HTTP requests by route template and status", ["method", "route", "status"], registry=r)
        self.latency = Histogram(
            "fedqa_http_request_duration_seconds",
            "HTTP request latency by route template (until the last byte of the body)",
            ["method", "route"],
            buckets=_HTTP_BUCKETS,
            registry=r,
        )
        self.in_progress = Gauge("fedqa_http_requests_in_progress", "Requests being handled (until the last byte)", registry=r)
        self.rejected = Counter("fedqa_http_rejected", "Requests refused before the route ran, by reason", ["reason"], registry=r)
        self.stage = Histogram(
            "fedqa_stage_seconds",
            "Answering pipeline stage durations (router, gate, embed, search, retrieval, generate, total)",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self.domain_search = Histogram(
            "fedqa_domain_search_seconds", "Search time of one domain's collection", ["domain"], buckets=_STAGE_BUCKETS, registry=r
        )
        self.active_domains = Histogram(
            "fedqa_active_domains", "Domains the gate activated per question", buckets=(1, 2, 3, 4, 5, 6, 8, 10, 16, 32), registry=r
        )
        self.domain_active = Counter("fedqa_domain_activations", "Questions for which the gate activated a domain", ["domain"], registry=r)
        self.gate_fallback = Counter("fedqa_gate_fallbacks", "Questions where no domain was drawn and the argmax domain was used", registry=r)
        self.answers = Counter("fedqa_answers", "Answers by answer_mode", ["mode"], registry=r)
        self.answer_errors = Counter("fedqa_answer_errors", "Answers that carry an error (LLM failed or timed out, nothing matched)", registry=r)

    def request_started(self) -> None:
        """One more request in flight (the middleware calls this, and :meth:`observe_request` when it ends)."""
        self.in_progress.inc()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished HTTP request."""
        self.in_progress.dec()
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def observe_answer(self, answer: Mapping[str, Any] | Any) -> None:
        """Stage timings, active domains and answer mode of one answer (an AskResponse or its dict)."""
        data = answer if isinstance(answer, Mapping) else answer.model_dump(include={"timings_ms", "routing", "answer_mode", "error"})
        for name, ms in (data.get("timings_ms") or {}).items():
            if name.startswith("search."):
                self.domain_search.labels(name[len("search.") :]).observe(ms / 1000.0)
            elif name in STAGES:
                self.stage.labels(name).observe(ms / 1000.0)
        routing = data.get("routing") or {}
        active = routing.get("active_domains") or []
        if routing:
            self.active_domains.observe(len(active))
            for d in active:
                self.domain_active.labels(d).inc()
            if routing.get("fallback"):
                self.gate_fallback.inc()
        if data.get("answer_mode"):
            self.answers.labels(data["answer_mode"]).inc()
        if data.get("error"):
            self.answer_errors.inc()

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)


def get_metrics(request: Request) -> Metrics | None:
    """The app's metrics (None for an app built without them)."""
    return getattr(request.app.state, "metrics", None)


def record_answer(request: Request, answer: Mapping[str, Any] | Any) -> None:
    """Record an answer's stage timings and routing; any route that answers questions calls this."""
    metrics = get_metrics(request)
    if metrics is not None:
        metrics.observe_answer(answer)


router = APIRouter(tags=["operations"])


async def _may_read(everything: bool = Depends(sees_everything), key: str | None = Depends(presented_key)) -> None:
    """The metrics name every product: while some API key sees only some products, they need a key that sees
    every product (or an admin key); else they are open, like the probes."""
    if everything:
        return
    detail = "/metrics names every product: it needs an API key that sees every product, or an admin key"
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})
    raise HTTPException(status.HTTP_403_FORBIDDEN, detail)


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(_may_read)])
async def metrics_endpoint(request: Request) -> Response:
    """Prometheus exposition of the app's registry (on the event loop, like the probes: it reads memory and /proc)."""
    metrics = get_metrics(request)
    body = metrics.render() if metrics is not None else b""
    return Response(body, media_type=CONTENT_TYPE_LATEST)
