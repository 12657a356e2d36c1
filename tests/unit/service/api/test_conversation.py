"""The turn rules of a chat that follows the user, on faq6's product names (the served chat:
tests/integration/api/test_conversation_chat.py)."""

from __future__ import annotations

from service.api.conversation import Turn, follow, named_products, url_citations
from tests.integration.api.test_chat import base_url, client  # noqa: F401 - the served demo app and its openai client

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
