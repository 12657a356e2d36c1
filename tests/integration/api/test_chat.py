"""/v1/chat/completions and /v1/models through the official ``openai`` client against the app served by a
real uvicorn server on a free port (demo home, extractive answers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import openai
import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from tests.utils import ambiguous_question, make_settings, served_app


@asynccontextmanager
async def _keep_open(app: object) -> AsyncIterator[None]:
    """A lifespan that does nothing: the app's own would close the shared pipeline when the server stops."""
    yield


@pytest.fixture(scope="module")
def base_url(demo_pipeline):
    settings = make_settings(demo_pipeline.settings.home_dir, api_keys="chat-key")
    state = ServiceState(settings)
    state.pipeline = demo_pipeline
    app = create_app(settings, state)
    app.router.lifespan_context = _keep_open  # the shared pipeline stays open
    with served_app(app) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def client(base_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="chat-key", max_retries=0, timeout=120)


def test_models_lists_fedqa(client):
    assert [m.id for m in client.models.list().data] == ["fedqa"]


def test_chat_answer_cites_sources_with_routing_in_the_extra_field(client):
    r = client.chat.completions.create(model="fedqa", messages=[{"role": "user", "content": "How do I import contacts from a spreadsheet?"}])
    text = r.choices[0].message.content
    extra = r.model_extra["fedqa"]
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "stop"
    assert "[1]" in text or "[2]" in text or "[3]" in text
    assert extra["answer_mode"] == "extractive" and extra["citations"]
    cited = extra["sources"][extra["citations"][0] - 1]
    assert cited["domain"] == "orbit" and text.rsplit(" [", 1)[0] in cited["text"]
    assert "orbit" in extra["routing"]["active_domains"]


def test_streamed_chunks_build_the_same_answer(client):
    messages = [{"role": "user", "content": "How is the CSAT score calculated?"}]
    plain = client.chat.completions.create(model="fedqa", messages=messages)
    chunks = list(client.chat.completions.create(model="fedqa", messages=messages, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["fedqa"]["answer_mode"] == "extractive"


def test_follow_up_is_routed_with_the_earlier_turn(client):
    follow_up = "What is the largest file I can use?"
    alone = client.chat.completions.create(model="fedqa", messages=[{"role": "user", "content": follow_up}])
    turns = [
        {"role": "user", "content": "How do I import contacts from a spreadsheet?"},
        {"role": "assistant", "content": "Go to Contacts > Import and upload your CSV or XLSX file [1]."},
        {"role": "user", "content": follow_up},
    ]
    r = client.chat.completions.create(model="fedqa", messages=turns)
    extra = r.model_extra["fedqa"]
    probs = extra["routing"]["probabilities"]
    assert max(probs, key=probs.get) == "orbit"
    assert extra["sources"][0]["domain"] == "orbit"
    assert probs["orbit"] > alone.model_extra["fedqa"]["routing"]["probabilities"]["orbit"]
    assert extra["retrieval_query"].startswith("How do I import contacts")
    # A follow-up that opens with "And, ..." joined to the earlier turn is not split into two questions.
    turns[-1] = {"role": "user", "content": "And, what is the largest file I can use?"}
    joined = client.chat.completions.create(model="fedqa", messages=turns).model_extra["fedqa"]
    assert "? And, what is the largest" in joined["retrieval_query"]
    assert not (joined["routing"]["selector"] or {}).get("questions")


def test_chat_needs_the_api_key_and_a_user_question(base_url, client):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="fedqa", messages=[{"role": "assistant", "content": "hello"}])


def test_what_is_searched_stays_within_the_query_length_limit(client, demo_pipeline):
    """The previous turn joined to the question is what is searched: it is cut to fit FEDQA_MAX_QUERY_CHARS, and a
    last message over the limit is refused naming ``messages`` (issue 28, fault 8)."""
    limit = demo_pipeline.settings.max_query_chars
    question = "How do I import contacts from a spreadsheet?"
    long_turn = "Tell me about contacts. " * 20_000  # 480,000 characters, under the 1 MiB body limit
    turns = [{"role": "user", "content": long_turn}, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": question}]
    extra = client.chat.completions.create(model="fedqa", messages=turns).model_extra["fedqa"]
    searched = extra["retrieval_query"]
    assert len(searched) <= limit and searched.endswith(question)
    assert searched.count("Tell me about contacts.") >= 50  # the end of the previous turn is still searched with it
    assert extra["sources"] and extra["routing"]["active_domains"]
    with pytest.raises(openai.UnprocessableEntityError) as exc:
        client.chat.completions.create(model="fedqa", messages=[{"role": "user", "content": "x" * (limit + 1)}])
    detail = exc.value.response.text  # the openai client's message is the status alone for a body without "error"
    assert "messages" in detail and str(limit) in detail


def test_question_fitting_several_products_gets_a_short_answer_per_product(client, demo_pipeline):
    question = ambiguous_question(demo_pipeline)
    r = client.chat.completions.create(model="fedqa", messages=[{"role": "user", "content": question}])
    text, extra = r.choices[0].message.content, r.model_extra["fedqa"]
    assert extra["answer_mode"] == "by_product" and len(extra["products"]) >= 2
    parts = text.split("\n\n")
    assert [p.split(": ", 1)[0] for p in parts] == [p["domain"] for p in extra["products"]]
    for part, product in zip(parts, extra["products"], strict=True):
        short = part.split(": ", 1)[1]
        assert len(short.split()) <= len(product["answer"].split()) and short.split(" [")[0][:40] in product["answer"]
    cited = [a.url_citation for a in r.choices[0].message.annotations or []]
    assert cited and all(c.url in {s["source"] for s in extra["sources"]} for c in cited)
    chunks = list(client.chat.completions.create(model="fedqa", messages=[{"role": "user", "content": question}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text


def test_clarify_asks_which_product_then_answers_the_one_named(client, demo_pipeline):
    question = ambiguous_question(demo_pipeline)
    asked = [{"role": "user", "content": question}]
    r = client.chat.completions.create(model="fedqa", messages=asked, extra_body={"clarify": True})
    text, products = r.choices[0].message.content, [p["domain"] for p in r.model_extra["fedqa"]["products"]]
    assert "Which product do you mean" in text and text.endswith("?") and all(d in text for d in products)
    assert not r.choices[0].message.annotations
    chunks = list(client.chat.completions.create(model="fedqa", messages=asked, extra_body={"clarify": True}, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    chosen = products[-1]
    reply = client.chat.completions.create(
        model="fedqa", messages=[*asked, {"role": "assistant", "content": text}, {"role": "user", "content": chosen}], extra_body={"clarify": True}
    )
    extra = reply.model_extra["fedqa"]
    assert extra["answer_mode"] != "by_product" and {s["domain"] for s in extra["sources"]} == {chosen}
    assert extra["retrieval_query"] == question
