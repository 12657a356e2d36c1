"""Liveness under load, over real HTTP (uvicorn on loopback) with a slow OpenAI-compatible LLM endpoint started here.

- A retrieval-only ``/ask`` that waits on the LLM (``strategy: lfs``) does not hold up the event loop (issue 28, fault 1).
- With 80 slow answers in flight, ``/healthz``, ``/readyz`` and ``/metrics`` answer within a second (fault 2).
- Beyond ``FEDQA_MAX_CONCURRENT_ANSWERS`` answers in flight, /ask and chat get 503 with Retry-After at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from service.generation.openai_llm import OpenAILLM
from tests.utils import make_settings, pipeline_with, served_app, serving_in_thread

QUESTION = "How do I import contacts from a spreadsheet?"


class SlowLLM(ThreadingHTTPServer):
    """An OpenAI-compatible chat endpoint that answers "yes" after ``delay_s``; counts the calls in flight."""

    daemon_threads = True
    request_queue_size = 256  # 80 connections at once must not overflow the listen backlog

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        super().__init__(("127.0.0.1", 0), _SlowHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1


class _SlowHandler(BaseHTTPRequestHandler):
    server: SlowLLM

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.enter()
        try:
            time.sleep(self.server.delay_s)
        finally:
            self.server.leave()
        choice = {"index": 0, "message": {"role": "assistant", "content": "yes"}, "finish_reason": "stop"}
        body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "slow", "choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def slow_llm_server(delay_s: float) -> Iterator[SlowLLM]:
    with serving_in_thread(SlowLLM(delay_s)) as server:
        yield server


@pytest.fixture()
def slow_llm() -> Iterator[SlowLLM]:
    yield from slow_llm_server(3.0)


def _serve(pipeline, **settings):  # noqa: ANN001, ANN202
    settings_ = make_settings(pipeline.settings.home_dir, rate_limit_per_minute=0, **settings)
    state = ServiceState(settings_)
    state.pipeline = pipeline_with(pipeline, settings=settings_)
    return served_app(create_app(settings_, state))


def _wait(condition, timeout: float = 60.0) -> None:  # noqa: ANN001
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, "timed out waiting"
        time.sleep(0.02)


def _timed_get(client: httpx.Client, path: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    r = client.get(path)
    return r.status_code, time.perf_counter() - t0


def test_a_retrieval_only_question_waiting_on_the_llm_does_not_hold_up_the_event_loop(demo_pipeline, demo_onnx_dir, slow_llm):
    """The page's Compare button sends ``generate: false``; with lfs it waits on one LLM call per domain. The old code
    ran it in the event loop's thread whenever nothing else was in flight and the query encoder was ONNX Runtime."""
    from service.retrieval.encoder import Encoder, EncoderBackend

    onnx = Encoder(backend="onnx", onnx_dir=demo_onnx_dir)  # the encoder with which the old code answered inline
    assert onnx.backend is EncoderBackend.ONNX, onnx.backend_error
    pipeline = pipeline_with(demo_pipeline, encoder=onnx, llm=OpenAILLM(slow_llm.url, "slow"))
    with _serve(pipeline) as url, httpx.Client(base_url=url, timeout=60) as client:
        result: dict[str, httpx.Response] = {}
        asker = threading.Thread(target=lambda: result.update(r=client.post("/ask", json={"query": QUESTION, "strategy": "lfs", "generate": False})))
        asker.start()
        _wait(lambda: slow_llm.in_flight > 0)
        probes = [_timed_get(client, "/healthz") for _ in range(3)]
        asker.join(120)
    assert all(status == 200 and seconds < 1.0 for status, seconds in probes), probes
    r = result["r"]
    assert r.status_code == 200 and r.json()["routing"]["strategy"] == "lfs" and r.json()["sources"], r.text
    assert slow_llm.calls >= 1


def test_probes_answer_within_a_second_with_80_slow_answers_in_flight(demo_pipeline, slow_llm):
    """80 answers waiting on a 3 s LLM fill the thread pool (40 threads); the probes do not wait for a thread."""
    pipeline = pipeline_with(demo_pipeline, llm=OpenAILLM(slow_llm.url, "slow"))
    n = 80
    with _serve(pipeline, max_concurrent_answers=n) as url:
        statuses: list[int] = []
        lock = threading.Lock()

        def ask() -> None:
            with httpx.Client(base_url=url, timeout=120) as c:
                code = c.post("/ask", json={"query": QUESTION}).status_code
            with lock:
                statuses.append(code)

        askers = [threading.Thread(target=ask) for _ in range(n)]
        for t in askers:
            t.start()
        with httpx.Client(base_url=url, timeout=30) as client:
            _wait(lambda: slow_llm.in_flight >= 30)  # the pool is full of answers waiting on the LLM
            in_flight_then = n - len(statuses)
            probes = [(path, *_timed_get(client, path)) for _ in range(3) for path in ("/healthz", "/readyz", "/metrics")]
        for t in askers:
            t.join(180)
    assert in_flight_then >= 60, in_flight_then
    assert all(status == 200 and seconds < 1.0 for _, status, seconds in probes), probes
    assert statuses == [200] * n
    assert slow_llm.peak >= 30


def test_answers_beyond_the_cap_get_503_with_retry_after_at_once(demo_pipeline, slow_llm):
    pipeline = pipeline_with(demo_pipeline, llm=OpenAILLM(slow_llm.url, "slow"))
    with _serve(pipeline, max_concurrent_answers=2) as url, httpx.Client(base_url=url, timeout=60) as client:
        results: list[int] = []
        askers = [threading.Thread(target=lambda: results.append(client.post("/ask", json={"query": QUESTION}).status_code)) for _ in range(2)]
        for t in askers:
            t.start()
        _wait(lambda: slow_llm.in_flight >= 2)
        t0 = time.perf_counter()
        refused = client.post("/ask", json={"query": QUESTION})
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}]})
        quick = time.perf_counter() - t0
        assert client.get("/healthz").status_code == 200
        for t in askers:
            t.join(60)
        assert client.post("/ask", json={"query": QUESTION, "generate": False}).status_code == 200  # room again
        metrics = client.get("/metrics").text
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
    assert "FEDQA_MAX_CONCURRENT_ANSWERS" in refused.json()["detail"]
    assert chat.status_code == 503 and chat.headers["retry-after"]
    assert quick < 1.0 and results == [200, 200]
    assert 'fedqa_http_rejected_total{reason="busy"} 2.0' in metrics
