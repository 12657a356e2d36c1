"""A chat's turns as one request: what is answered, what is searched, and which products the user named.

- A product named in the latest turn wins: the turn is searched on its own, restricted to the named products
  (the ``domains`` filter), whatever the previous turn was about.
- A follow-up that only names another product ("and in Perl?", "what about Ledger?") reuses the previous
  question (its own product names taken out), restricted to the named products.
- Otherwise a follow-up is searched joined to the previous user turn, so "what is the largest file I can use?"
  keeps the previous turn's context; the answer is to the latest question.

And the OpenAI-style citations of an answer: one ``url_citation`` annotation per [n] in the text; an answer given by
product as chat text: a short answer per product, or (``clarify``) the question which product is meant.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.schemas import ProductAnswer
from service.text import sentences

#: Words that carry no question of their own in a follow-up such as "and in Perl?" or "what about for Ledger then?".
FILLER = frozenset(
    "a about also and any as at do does for how i in is it me of ok okay on or please same so that the then there this to what with you your".split()
)
WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*", re.UNICODE)
CITATION = re.compile(r"\[(\d+)\]")
SHORT_WORDS = 40  # words of a product's answer in a chat reply (its first sentences; the full one is in ``fedqa``)


@dataclass(frozen=True)
class Turn:
    """What one chat request answers (``question``), searches (``retrieval_query``) and is restricted to (``domains``)."""

    question: str
    retrieval_query: str
    domains: list[str] | None = None


def _product_pattern(domain: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in re.split(r"[-_\s]+", domain) if w]
    return re.compile(r"(?<![\w-])" + r"[-_\s]?".join(words) + r"(?![\w-])", re.IGNORECASE)


def named_products(text: str, domains: Sequence[str]) -> list[str]:
    """The products (domain names) the text names as words, in the index's order."""
    return [d for d in domains if _product_pattern(d).search(text)]


def without_products(text: str, domains: Sequence[str]) -> str:
    """The text with every product name taken out (spaces tidied)."""
    for d in domains:
        text = _product_pattern(d).sub(" ", text)
    return re.sub(r"\s+([?.!,;:])", r"\1", re.sub(r"\s+", " ", text)).strip()


def only_names_products(text: str, domains: Sequence[str]) -> bool:
    """Whether the text, product names aside, is filler ("and in Perl?")."""
    return all(w.lower() in FILLER for w in WORD.findall(without_products(text, domains)))


def follow(users: Sequence[str], domains: Sequence[str], *, max_chars: int | None = None) -> Turn:
    """The request for the latest of the user's turns ``users`` (oldest first) over the index's ``domains``; what is
    searched stays within ``max_chars`` (a reused question is cut to it, a joined previous turn to its end)."""
    question = users[-1]
    named = named_products(question, domains)
    if named and len(users) > 1 and only_names_products(question, domains):
        previous = next((u for u in reversed(users[:-1]) if not only_names_products(u, domains)), users[-2])
        asked = (without_products(previous, domains) or previous)[:max_chars]
        return Turn(asked, asked, named)
    if named or len(users) < 2:
        return Turn(question, question, named or None)
    room = len(users[-2]) if max_chars is None else max_chars - len(question) - 1
    context = users[-2][-room:].lstrip() if room > 0 else ""
    return Turn(question, f"{context} {question}" if context else question)


def url_citations(content: str, sources: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI ``url_citation`` annotations: each [n] of ``content`` with its source's page and title."""
    out = []
    for m in CITATION.finditer(content):
        n = int(m.group(1))
        if 1 <= n <= len(sources):
            s = sources[n - 1]
            out.append(
                {
                    "type": "url_citation",
                    "url_citation": {"url": s.get("source") or "", "title": s.get("title") or "", "start_index": m.start(), "end_index": m.end()},
                }
            )
    return out


def short_answer(text: str, max_words: int = SHORT_WORDS) -> str:
    """The first sentences of ``text`` within ``max_words`` (at least one), keeping a citation: the first [n] of the
    text is added when the sentences kept have none."""
    kept: list[str] = []
    for sentence in sentences(text) or [text]:
        if kept and len(" ".join([*kept, sentence]).split()) > max_words:
            break
        kept.append(sentence)
    out = " ".join(kept).strip()
    first = CITATION.search(text)
    return f"{out} {first.group(0)}" if first and not CITATION.search(out) else out


def by_product_text(products: Sequence[ProductAnswer], *, clarify: bool = False) -> str:
    """A chat reply to an answer given by product: a short answer per product, each labelled; with ``clarify``,
    the question which of the products is meant (naming them), instead of answering."""
    names = [p.domain for p in products]
    if clarify:
        listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        return f"Your question fits several products. Which product do you mean: {listed}?"
    return "\n\n".join(f"{p.domain}: {short_answer(p.answer or '')}" for p in products)
