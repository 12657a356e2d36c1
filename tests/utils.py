"""Helpers shared by test modules (fixtures stay in conftest.py)."""

from __future__ import annotations

import json
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import uvicorn

from service.config import Settings
from service.retrieval.onnx_smoothing import Calibration, corpus_calibration
from service.retrieval.passage import Passage

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]  # the clone: tests/ lies in it, each test module some folders below


def present(value: T | None) -> T:
    """``value``, asserted not None: where a test expects a value that the API's type allows to be missing."""
    assert value is not None
    return value


def make_settings(home: Path, **overrides: Any) -> Settings:
    """Settings for a test home; nothing read from the environment but these values (the per-user cache lies
    in the home, so tests leave the user's cache alone)."""
    overrides.setdefault("cache", Path(home) / "cache")
    return Settings(home=home, llm_backend="none", **overrides)


def ingested_passages(path: Path) -> list[Passage]:
    """The passages an ingest of ``path`` (a file or a folder of products) stores, as it segments them."""
    from indexes.loaders import load_paths, segmentation_for
    from service.retrieval.encoder import packaged_minilm_path, token_counter

    return list(load_paths([path], domain=None, segmentation=segmentation_for(Settings(), token_counter(packaged_minilm_path()))))


def ingest_calibration(path: Path) -> Calibration:
    """The :class:`~service.retrieval.onnx_smoothing.Calibration` a first ingest of ``path`` into an ONNX home
    makes: a sample of its passages as the ingest segments them (its base-model export lies under that fingerprint)."""
    return corpus_calibration(p.text for p in ingested_passages(path))


def wait_until(condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.02) -> T:
    """Poll ``condition`` until it returns a true value or ``timeout`` seconds pass; its last value (assert on it).

    For a test that waits on a worker, a thread or a process: it goes on as soon as the condition holds, and a slow
    machine only makes it wait longer, up to the deadline, instead of a fixed sleep that is too short there and
    wasted elsewhere."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(interval)
    return value


def wait_ready(url: str, proc: subprocess.Popen | None = None, timeout: float = 300.0, interval: float = 0.5) -> httpx.Response | None:
    """Poll ``url``'s ``/readyz`` until it answers 200, ``proc`` (the process serving it, or running the command that
    starts it) exits, or ``timeout`` seconds pass; the last response (None: it never answered). Assert on it, and on
    ``proc.poll()``."""
    last: httpx.Response | None = None

    def settled() -> bool:
        nonlocal last
        if proc is not None and proc.poll() is not None:
            return True
        try:
            last = httpx.get(f"{url}/readyz", timeout=2)
        except httpx.HTTPError:
            return False
        return last.status_code == 200

    wait_until(settled, timeout, interval)
    return last


def json_documents(text: str) -> list[Any]:
    """The JSON documents printed one after another in ``text`` (``fedqa ask`` with several questions prints one each)."""
    decoder, out, rest = json.JSONDecoder(), [], text.strip()
    while rest:
        obj, end = decoder.raw_decode(rest)
        out.append(obj)
        rest = rest[end:].strip()
    return out


def ask_outputs(text: str) -> list[dict[str, Any]]:
    """The ``fedqa ask`` answers in ``text``, in order, where other commands' output lies between them (a README
    block's log): each is the JSON object that starts with its ``"query"`` field."""
    return [json.loads('{\n  "query"' + part.split("\n}\n", 1)[0] + "\n}") for part in text.split('{\n  "query"')[1:]]


def free_port() -> int:
    """A loopback port nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipeline_with(pipeline: Any, **attrs: Any) -> Any:
    """A copy of a (session-wide) pipeline with another ``llm=`` or ``settings=`` (:meth:`Pipeline.with_llm
    <service.pipeline.Pipeline.with_llm>`), and other attributes replaced (``encoder=``).

    The shared pipeline (and its answering component) is left as it is, so no test changes what the next
    one sees. The copy shares the router, encoder, store and search threads, so its ``close()`` does nothing.
    """
    clone = pipeline.with_llm(attrs.pop("llm", pipeline.llm), settings=attrs.pop("settings", None))
    for name, value in attrs.items():
        if not hasattr(pipeline, name):
            raise AttributeError(f"the pipeline has no attribute {name!r}")
        setattr(clone, name, value)
    return clone


S = TypeVar("S", bound="socketserver.BaseServer")


@contextmanager
def serving_in_thread(server: S) -> Iterator[S]:
    """``server`` (a stdlib socket server: a stub HTTP endpoint) serving in a daemon thread until the block ends."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def served_app(app: Any, *, lifespan: Literal["auto", "on", "off"] = "off", settings: Settings | None = None) -> Iterator[str]:
    """Run an ASGI app under a real uvicorn server on a free loopback port (in a thread); yields its base URL.
    With ``settings``, uvicorn is configured as ``fedqa serve`` configures it (:func:`service.api.server.server_config`:
    the cap on connections per address)."""
    if settings is not None:
        from service.api.server import server_config

        config = server_config(app, settings, host="127.0.0.1", port=free_port(), lifespan=lifespan, log_level="warning")
    else:
        config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), lifespan=lifespan, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


#: Questions whose words fit several demo products (each has webhooks, an audit log, roles, teammates to invite).
AMBIGUOUS = (
    "How do I connect a webhook?",
    "Can I get an audit log of changes?",
    "How do I change roles and permissions?",
    "How do I invite a teammate?",
)


_AMBIGUOUS_FOUND: dict[int, str] = {}


def ambiguous_question(pipeline: Any) -> str:
    """The first of :data:`AMBIGUOUS` that the pipeline (its fitted split rule) answers by product (found once per
    pipeline); the test fails when it answers none of them so."""
    from service.ask import answer
    from service.schemas import AskRequest

    if id(pipeline) not in _AMBIGUOUS_FOUND:
        found = next((q for q in AMBIGUOUS if answer(pipeline, AskRequest(query=q)).answer_mode == "by_product"), None)
        if found is None:
            raise AssertionError(f"the fitted split rule answers none of {AMBIGUOUS} by product")
        _AMBIGUOUS_FOUND[id(pipeline)] = found
    return _AMBIGUOUS_FOUND[id(pipeline)]
