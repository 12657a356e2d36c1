"""The four strategies (mkpqa, uis, rfs, lfs) on the demo index, and /ask accepting every strategy."""

from __future__ import annotations

from service.retrieval.federated import merge, search_domains
from tests.utils import pipeline_with


def test_strategies_on_the_demo_index(demo_pipeline, selector_llm):
    query = "How do I import contacts from a spreadsheet?"
    prepared = demo_pipeline.prepare(query)
    probs = prepared.probs
    argmax = max(probs, key=probs.get)

    rfs = demo_pipeline.retrieve(query, top_k=5, strategy="rfs", prepared=prepared)
    assert rfs.routing.active_domains == [argmax] and {h.passage.domain for h in rfs.hits} == {argmax}

    uis = demo_pipeline.retrieve(query, top_k=5, strategy="uis", prepared=prepared)
    assert uis.routing.active_domains == demo_pipeline.domains
    # The top-5 of the unified index: every domain's top-50 merged by raw score gives the same 5.
    per, _ = search_domains(demo_pipeline.store, prepared.vector, demo_pipeline.domains, 50)
    unified = merge(per, {d: 1.0 for d in per}, 5)
    assert [h.passage.point_id for h in uis.hits] == [c.point_id for c in unified]
    assert all(h.unified_score == h.score and h.domain_prob == 1.0 for h in uis.hits)

    mk = demo_pipeline.retrieve(query, top_k=5, strategy="mkpqa", gate_mode="deterministic", prepared=prepared)
    act = mk.routing.activation
    assert sorted(mk.routing.active_domains) == (sorted(d for d, a in act.items() if a >= 0.5) or [argmax])

    other = next(d for d in demo_pipeline.domains if d != argmax)
    lfs = pipeline_with(demo_pipeline, llm=selector_llm({other})).retrieve(query, top_k=5, strategy="lfs", prepared=prepared)
    assert lfs.routing.active_domains == [other] and lfs.routing.strategy == "lfs"
    assert lfs.routing.selector is not None and lfs.routing.selector.votes is not None and lfs.routing.selector.votes[other] is True
    assert {h.passage.domain for h in lfs.hits} == {other}


def test_ask_accepts_every_strategy(demo_pipeline):
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.api.state import ServiceState

    state = ServiceState(demo_pipeline.settings)
    state.pipeline = demo_pipeline
    client = TestClient(create_app(demo_pipeline.settings, state))  # no lifespan: the shared pipeline stays open
    for strategy in ("mkpqa", "uis", "rfs", "lfs"):
        body = client.post("/ask", json={"query": "How do refunds work?", "generate": False, "strategy": strategy}).json()
        assert body["strategy"] == body["routing"]["strategy"] == strategy and body["sources"]
        if strategy == "uis":
            assert body["routing"]["active_domains"] == demo_pipeline.domains
        if strategy in ("rfs", "lfs"):  # lfs without an LLM: the router's argmax, failures counted
            assert len(body["routing"]["active_domains"]) == 1
        if strategy == "lfs":
            assert body["routing"]["fallback"] and body["routing"]["selector"]["failures"] == len(demo_pipeline.domains)
