"""Each source's ``rank_score`` (the key the sources are sorted by) and ``features`` (what placed it), on /ask (JSON
and streamed) and in the chat's extra field, on the demo pipeline: with the fitted ranking, with the lexical ranking
fused (FEDQA_LEXICAL=always); with a trained reranker: tests/integration/training/test_reranker.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import ServiceState
from tests.utils import ambiguous_question, pipeline_with

QUESTIONS = (
    "How do I import contacts from a spreadsheet?",
    "How is the CSAT score calculated?",
    "How do I set up SCIM provisioning?",
    "How do I import contacts from a spreadsheet? And how is the CSAT score calculated?",  # two questions, interleaved
)
STRATEGIES = ("fused", "mkpqa", "uis", "rfs")
RRF_K = 60.0


def _client(pipeline: Any) -> TestClient:
    state = ServiceState(pipeline.settings)
    state.pipeline = pipeline
    return TestClient(create_app(pipeline.settings, state))  # no lifespan: the shared pipeline stays open


def _ask(client: TestClient, **body: Any) -> list[dict]:
    """The sources of one /ask, asked as JSON and streamed (both must agree)."""
    r = client.post("/ask", json={"generate": False, **body})
    assert r.status_code == 200, r.text
    sources = r.json()["sources"]
    with client.stream("POST", "/ask", json={"generate": False, **body, "stream": True}) as s:
        events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    assert events[0]["sources"] == events[-1]["sources"] == sources  # the retrieval event and done
    return sources


def _check(sources: list[dict]) -> None:
    """rank_score non-increasing down the list; every source's features agree with its scores."""
    keys = [s["rank_score"] for s in sources]
    assert sources and keys == sorted(keys, reverse=True), keys
    for s in sources:
        f = s["features"]
        assert f["similarity"] == s["score"] and f.get("weight", f["product_probability"]) == s["domain_weight"]  # w_j where it is not p_j
        if "question_rank" in f:  # p_j of its own question (the routing shows each product's highest over the questions)
            assert f["product_probability"] <= s["domain_prob"]
        else:
            assert f["product_probability"] == s["domain_prob"]


def _rrf(f: dict[str, float]) -> float:
    return sum(1.0 / (RRF_K + f[k]) for k in ("dense_rank", "lexical_rank") if k in f)


def test_rank_score_orders_the_sources_of_every_strategy(demo_pipeline):
    client = _client(demo_pipeline)
    for query in QUESTIONS:
        for strategy in STRATEGIES:
            sources = _ask(client, query=query, strategy=strategy, seed=3)
            _check(sources)
            several = query.count("?") > 1 and strategy == "fused"  # the default strategy retrieves each question
            assert all(("question_rank" in s["features"]) == several for s in sources)
            if not several and strategy != "fused":  # the baselines rank by U alone (no prior, no fusion)
                assert [s["rank_score"] for s in sources] == [s["unified_score"] for s in sources]
    _check(_ask(client, query=QUESTIONS[0], domains=[demo_pipeline.domains[0]]))  # a product filter


@pytest.mark.usefixtures("default_ranking_serves")  # the default ranking's fusion (a serving ranking model reads BM25 as features)
def test_with_the_lexical_ranking_fused_rank_score_is_the_fusion_of_the_two_ranks(demo_pipeline):
    if demo_pipeline.lexical is None:
        pytest.skip("the demo index has no lexical index")
    fused = pipeline_with(demo_pipeline, settings=demo_pipeline.settings.model_copy(update={"lexical": "always"}))
    client = _client(fused)
    for query in QUESTIONS[:3] + ("relayhost timeout connect webhook",):
        sources = _ask(client, query=query, top_k=8)
        _check(sources)
        assert any("lexical_rank" in s["features"] for s in sources)
        for s in sources:
            assert s["rank_score"] == pytest.approx(_rrf(s["features"]), abs=2e-6)
            assert ("bm25" in s["features"]) == ("lexical_rank" in s["features"])


def test_an_answer_by_product_and_the_chat_extra_field_carry_them(demo_pipeline):
    client = _client(demo_pipeline)
    question = ambiguous_question(demo_pipeline)
    r = client.post("/ask", json={"query": question})
    assert r.status_code == 200 and r.json()["answer_mode"] == "by_product"
    _check(r.json()["sources"])  # one product's passages after another's: still non-increasing
    chat = client.post("/v1/chat/completions", json={"model": "fedqa", "messages": [{"role": "user", "content": QUESTIONS[1]}]})
    assert chat.status_code == 200, chat.text
    extra = chat.json()["fedqa"]["sources"]
    _check(extra)
    assert extra == _ask(client, query=QUESTIONS[1])
