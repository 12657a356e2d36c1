"""Issue 53 item 4, "safe with few labels": the README's own-documentation commands on a corpus that is not the
demo's (six Markdown pages of two products, 16 labelled questions, no out-of-scope file)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_readme import free_port, own_documentation_block
from tests.utils import ROOT, wait_ready

DATA = ROOT / "tests" / "data" / "fewlabel"
#: Questions the pages answer that are not among the labelled ones, and the README's off-topic one.
IN_SCOPE = ("Which themes come with Sitewright?", "How do readers unsubscribe from a newsletter?")
OFF_TOPIC = "How do I bake sourdough bread?"


def block_without_asks() -> str:
    """The README block's commands up to ``fedqa status`` (its own questions are about the demo's products)."""
    lines = own_documentation_block().splitlines()
    return "\n".join(line for line in lines if not line.startswith(("fedqa ask", "fedqa serve")))


@pytest.mark.slow
def test_few_labels_refuse_off_topic_and_answer_in_scope_and_say_the_defaults_serve(tmp_path: Path) -> None:
    """With 16 labelled questions (4 held out by ``train router``) "not covered" and the answer policy are too few to
    fit: their defaults serve, ``fedqa status`` and ``/readyz`` say so, the off-topic question is refused and the
    in-scope ones are answered with a quote."""
    shutil.copytree(DATA / "docs", tmp_path / "acme" / "docs")
    shutil.copy(DATA / "queries.jsonl", tmp_path / "acme" / "queries.jsonl")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(HOME=str(tmp_path), FEDQA_PORT=str(port), FEDQA_ENCODER_BACKEND="torch", FEDQA_LLM_BACKEND="none", HF_HUB_OFFLINE="1")
    asks = "\n".join(f'fedqa ask "{q}"' for q in (*IN_SCOPE, OFF_TOPIC))
    script = f"{block_without_asks()}\n{asks}\n"
    run = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    said = "questions the documentation does not cover are answered not_covered (default: 4 labelled questions, too few to fit (need 30))"
    assert f"has      not-covered decision: {said}" in out
    assert "has      answer policy: extractive answers use the unfitted rule (FEDQA_EXTRACTIVE_*) (default: 16 labelled questions" in out
    asked = {a["query"]: a for a in (json.loads('{\n  "query"' + part.split("\n}\n", 1)[0] + "\n}") for part in run.stdout.split('{\n  "query"')[1:])}
    assert asked[OFF_TOPIC]["answer_mode"] == "not_covered", asked[OFF_TOPIC]["confidence"]
    for q in IN_SCOPE:
        assert asked[q]["answer_mode"] == "extractive" and "[1]" in asked[q]["answer"], asked[q]["confidence"]
    assert asked[IN_SCOPE[0]]["sources"][0]["doc_id"].startswith("sitewright/themes#")
    assert asked[IN_SCOPE[1]]["sources"][0]["doc_id"].startswith("mailpost/subscribers#")

    serve = subprocess.Popen(
        ["bash", "-c", f'export PATH="{ROOT}/.venv/bin:$PATH" FEDQA_HOME="{tmp_path}/fedqa-acme"; exec fedqa serve'],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ready = wait_ready(f"http://127.0.0.1:{port}", serve, 300, 1)
        assert ready is not None and ready.status_code == 200
        decisions = ready.json()["decisions"]
        assert decisions["not_covered"]["decision"] == "default: 4 labelled questions, too few to fit (need 30)"
        assert decisions["answer_policy"]["decision"] == "default: 16 labelled questions, too few to fit (need 30)"
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
