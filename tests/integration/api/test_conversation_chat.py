"""A chat that follows the user over the served demo app (real uvicorn server, the official ``openai`` client):
product switches, "and in X?", several turns, citations.
"""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.api.test_chat import base_url, client  # noqa: F401 - the served demo app and its openai client
from tests.utils import present


@pytest.mark.slow
def test_chat_switches_product_when_the_user_names_another(client: openai.OpenAI):  # noqa: F811
    turns: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "How do I create API keys in Beacon?"},
        {"role": "assistant", "content": "Open Settings > API keys [1]."},
        {"role": "user", "content": "and what about webhook signing secrets in Ledger?"},
    ]
    extra = present(client.chat.completions.create(model="fedqa", messages=turns).model_extra)["fedqa"]
    assert extra["routing"]["given"] is True and extra["routing"]["active_domains"] == ["ledger"]
    assert {s["domain"] for s in extra["sources"]} == {"ledger"}


@pytest.mark.slow
def test_chat_and_in_another_product_over_three_turns(client: openai.OpenAI):  # noqa: F811
    first: ChatCompletionMessageParam = {"role": "user", "content": "How do I rotate an API key in Beacon?"}
    turns: list[ChatCompletionMessageParam] = [first, {"role": "assistant", "content": "..."}, {"role": "user", "content": "and in Ledger?"}]
    second = present(client.chat.completions.create(model="fedqa", messages=turns).model_extra)["fedqa"]
    assert second["retrieval_query"].startswith("How do I rotate an API key") and {s["domain"] for s in second["sources"]} == {"ledger"}
    turns += [{"role": "assistant", "content": "..."}, {"role": "user", "content": "What about Orbit?"}]
    third = present(client.chat.completions.create(model="fedqa", messages=turns).model_extra)["fedqa"]
    assert third["retrieval_query"].startswith("How do I rotate an API key") and {s["domain"] for s in third["sources"]} == {"orbit"}


@pytest.mark.slow
def test_the_openai_client_reads_url_citations_in_answers_and_streams(client: openai.OpenAI):  # noqa: F811
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "How do I import contacts from a spreadsheet?"}]
    r = client.chat.completions.create(model="fedqa", messages=messages)
    msg, sources = r.choices[0].message, present(r.model_extra)["fedqa"]["sources"]
    assert msg.annotations and all(a.type == "url_citation" for a in msg.annotations)
    content = present(msg.content)
    for a in msg.annotations:
        n = int(content[a.url_citation.start_index + 1 : a.url_citation.end_index - 1])
        assert a.url_citation.url == sources[n - 1]["source"] and a.url_citation.title == sources[n - 1]["title"]
    chunks = list(client.chat.completions.create(model="fedqa", messages=messages, stream=True))
    last = chunks[-1].choices[0].delta
    assert [a["url_citation"]["start_index"] for a in present(last.model_extra)["annotations"]] == [
        a.url_citation.start_index for a in msg.annotations
    ]
