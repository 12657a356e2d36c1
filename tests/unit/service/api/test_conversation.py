"""A chat that follows the user: product switches, "and in X?", several turns, and OpenAI-style citations read by
the official ``openai`` client (demo home, real uvicorn server); the turn rules on faq6's product names."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from service.api.conversation import Turn, follow, named_products, url_citations
from tests.integration.api.test_chat import base_url, client  # noqa: F401 - the served demo app and its openai client
from tests.utils import present

FAQ6 = ["debian", "git", "perl", "postgresql", "python", "sqlite"]


def test_and_in_another_product_asks_the_previous_question_there():
    users = ["How do I make a temporary file name in Python?", "and in Perl?"]
    assert follow(users, FAQ6) == Turn("How do I make a temporary file name in?", "How do I make a temporary file name in?", ["perl"])
    three = [*users, "What about SQLite then?"]
    assert follow(three, FAQ6).domains == ["sqlite"] and follow(three, FAQ6).question.startswith("How do I make a temporary file name")


def test_a_product_named_in_the_latest_turn_wins_and_other_follow_ups_keep_their_context():
    switched = follow(["How do I undo a commit in git?", "How do I roll back a transaction in PostgreSQL?"], FAQ6)
    assert switched == Turn("How do I roll back a transaction in PostgreSQL?", "How do I roll back a transaction in PostgreSQL?", ["postgresql"])
    plain = follow(["How do I undo a commit in git?", "And if it was already pushed?"], FAQ6)
    assert plain.domains is None and plain.retrieval_query == "How do I undo a commit in git? And if it was already pushed?"
    assert named_products("is pythonic code faster? sqlite3 too", FAQ6) == []  # words, not parts of words


def test_url_citations_point_at_each_bracketed_number():
    sources = [{"source": "orbit/import.md", "title": "Import"}, {"source": "https://x/y", "title": "Y"}]
    text = "Upload the file [1]. Then map columns [2][1]. Not a source [7]."
    ann = url_citations(text, sources)
    assert [a["url_citation"]["url"] for a in ann] == ["orbit/import.md", "https://x/y", "orbit/import.md"]
    assert all(text[a["url_citation"]["start_index"] : a["url_citation"]["end_index"]] in ("[1]", "[2]") for a in ann)


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
