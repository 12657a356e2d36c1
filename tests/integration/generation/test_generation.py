"""Generation with the real embedded LLM (SmolLM2 through transformers); the OpenAI-compatible backend is
tested against a real server in test_openai_backend.py."""

from __future__ import annotations

import pytest

from service.ask import answer, answer_stream
from service.generation.extractive import extractive_answer
from service.generation.local_llm import TransformersLLM
from service.generation.prompt import attribute, build_prompt, citations, drop_bad_citations, grounding
from service.pipeline import Pipeline
from service.retrieval.passage import Passage, RankedHit
from service.schemas import AskRequest
from tests.conftest import make_settings
from tests.utils import present


@pytest.fixture(scope="module")
def llm(embedded_llm) -> TransformersLLM:
    return embedded_llm  # one model per test session (conftest)


def _hit(i: int, text: str, title: str = "Guide > Section") -> RankedHit:
    return RankedHit(Passage(f"d/p#{i:03d}", "d", title, "d/p.md", text), 0.5, 0.9, 0.45)


def test_prompt_numbers_sources_and_ends_with_the_question():
    hits = [_hit(0, "Alpha text."), _hit(1, "Beta text.")]
    prompt = build_prompt("What is beta?", hits)
    assert "[1] (Guide > Section) Alpha text." in prompt and "[2] (Guide > Section) Beta text." in prompt
    assert prompt.endswith("Question: What is beta?\nAnswer:")


def test_citation_parsing_and_cleanup():
    assert citations("A [2]. B [1][2]. C [7].", 3) == [2, 1]
    assert drop_bad_citations("A [1]. B [9].", 2) == "A [1]. B ."
    cited = attribute("Refunds go back to the card. Unrelated words here.", [_hit(0, "Refunds go back to the original card.")])
    assert cited.startswith("Refunds go back to the card. [1]") and cited.endswith("Unrelated words here.")


def test_grounding_is_the_share_of_answer_words_found_in_the_sources():
    hits = [_hit(0, "Refunds take five business days.", title="Billing > Refunds")]
    assert grounding("Refunds take five business days [1].", hits) == 1.0
    # content words: refunds, arrive, instantly, bitcoin -> 1 of 4 grounded
    assert grounding("Refunds arrive instantly in bitcoin.", hits) == 0.25
    assert grounding("", hits) == 0.0


def test_extractive_answer_quotes_relevant_sentences_with_citations():
    hits = [
        _hit(0, "Invoices are emailed monthly. Refunds take five business days to reach the card."),
        _hit(1, "Webhooks retry for 24 hours."),
    ]
    answer = extractive_answer("How many days do refunds take?", hits, max_sentences=1)
    assert answer == "Refunds take five business days to reach the card. [1]"


def test_embedded_llm_answers_from_the_demo_with_citations(demo_pipeline, llm):
    pipeline = Pipeline(
        make_settings(demo_pipeline.settings.home_dir, llm_max_tokens=48, llm_timeout_s=600, min_grounding=0.0),
        router=demo_pipeline.router,
        encoder=demo_pipeline.encoder,
        store=demo_pipeline.store,
        llm=llm,
    )
    resp = answer(pipeline, AskRequest(query="How do I import contacts from a spreadsheet?", top_k=3))
    assert resp.answer_mode == "generative", resp.error
    assert resp.answer and len(resp.answer.split()) >= 3
    assert all(1 <= c <= 3 for c in resp.citations)
    assert present(resp.versions["llm"]).startswith("transformers:")

    events = list(answer_stream(pipeline, AskRequest(query="How do I import contacts from a spreadsheet?", top_k=3)))
    done = events[-1].data()
    streamed = "".join(e.data()["text"] for e in events if e.name == "token")
    assert events[0].name == "retrieval" and events[-1].name == "done"
    assert done["answer_mode"] == "generative"
    assert streamed.strip()
    # The final answer is the streamed completion plus citation clean-up: same opening words.
    assert done["answer"].split()[:3] == streamed.split()[:3]


def test_ungrounded_generation_is_replaced_by_quotes(demo_pipeline, llm):
    pipeline = Pipeline(
        make_settings(demo_pipeline.settings.home_dir, llm_max_tokens=32, llm_timeout_s=600, min_grounding=1.0),
        router=demo_pipeline.router,
        encoder=demo_pipeline.encoder,
        store=demo_pipeline.store,
        llm=llm,
    )
    resp = answer(pipeline, AskRequest(query="What happens to API tokens when SSO is enforced?", top_k=3))
    assert resp.answer_mode == "extractive"
    assert resp.error is not None and "not supported by the sources" in resp.error
    events = [e.name for e in answer_stream(pipeline, AskRequest(query="What happens to API tokens when SSO is enforced?", top_k=3))]
    assert "reset" in events and events.index("reset") < len(events) - 2  # the rejected tokens, reset, the quote
    assert resp.answer and resp.citations
