"""The OpenAI-compatible backend (the ``openai`` client) against a real OpenAI-compatible server:
``transformers serve`` with the shipped SmolLM2 (the GGUF dequantised once per session by the embedded
backend; the GGUF itself has no architecture in its config for the server), started on a free port."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.ask import answer
from service.generation.llm import LLMError
from service.generation.openai_llm import OpenAILLM
from service.generation.prompt import STOP, build_prompt
from service.pipeline import Pipeline
from service.retrieval.passage import Passage, RankedHit
from service.schemas import AskRequest
from tests.conftest import make_settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_path(embedded_llm) -> str:
    return str(embedded_llm.path)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory, model_path):
    """`transformers serve <model folder>` (the model preloaded) on a free port; its base URL."""
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.fail("transformers serve needs fastapi and uvicorn (installed with fedqa)")
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
    port = _free_port()
    log = tmp_path_factory.mktemp("tserve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [exe, "serve", model_path, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"transformers serve did not start: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _hit(text: str) -> RankedHit:
    return RankedHit(Passage("d/p#000", "d", "Beacon > Audit", "d/p.md", text), 0.6, 0.9, 0.54)


def test_complete_and_stream_give_the_same_greedy_text(server_url, model_path):
    llm = OpenAILLM(server_url, model_path)
    prompt = build_prompt("What does Beacon log?", [_hit("Beacon records every sign-in in the audit log.")])
    text = llm.complete(prompt, max_tokens=16, stop=STOP, timeout_s=120)
    assert text.strip()
    assert "".join(llm.stream(prompt, max_tokens=16, stop=STOP, timeout_s=120)) == text


def test_generated_answer_through_the_pipeline(server_url, model_path, demo_pipeline):
    pipeline = Pipeline(
        make_settings(demo_pipeline.settings.home_dir, llm_max_tokens=24, llm_timeout_s=120, min_grounding=0.0),
        router=demo_pipeline.router,
        encoder=demo_pipeline.encoder,
        store=demo_pipeline.store,
        llm=OpenAILLM(server_url, model_path),
    )
    resp = answer(pipeline, AskRequest(query="How do I import contacts from a spreadsheet?", top_k=3))
    assert resp.answer_mode == "generative", resp.error
    assert resp.answer and resp.versions["llm"] == f"openai:{model_path}"


def test_unknown_model_is_an_llm_error(server_url):
    with pytest.raises(LLMError):
        OpenAILLM(server_url, "no-such-model").complete("Hi", max_tokens=4, stop=[], timeout_s=60)
