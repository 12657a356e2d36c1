"""Synthetic queries for passages: an LLM generator (the paper's prompt) and a heuristic one.

Every synthetic query says which generator made it (``generator``), so a training set can be
filtered or weighted by origin later. The heuristic generator needs no capable LLM: it turns the
passage's section heading into a question and its first sentence into a keyword query.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Protocol

from service.generation.llm import LLM, LLMError
from service.retrieval.passage import Passage
from training.data.prompts import query_generation_prompt

log = logging.getLogger("fedqa.training.data")

# Section headings that say nothing about the content (man pages, POD, HTML boilerplate).
_GENERIC = {
    "description",
    "name",
    "synopsis",
    "summary",
    "introduction",
    "overview",
    "notes",
    "see also",
    "example",
    "examples",
    "details",
    "options",
    "author",
    "authors",
    "bugs",
    "copyright",
    "license",
    "contents",
    "index",
    "discussion",
    "general",
    "misc",
    "miscellaneous",
    "other",
    "faq",
    "answers",
}
_NUMBERING = re.compile(r"^\s*(?:[0-9]+(?:\.[0-9]+)*\.?|[A-Z]\.(?:[0-9]+\.?)*)\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class SyntheticQuery:
    """A generated question with the passage it was made from."""

    query: str
    doc_id: str
    domain: str
    generator: str
    extra: dict = field(default_factory=dict)

    def row(self) -> dict:
        """The JSON row written to ``synthetic.jsonl``."""
        return {k: v for k, v in asdict(self).items() if v or k != "extra"}


class QueryGenerator(Protocol):
    """Makes synthetic queries for passages."""

    name: str

    def generate(self, passages: Iterable[Passage]) -> Iterator[SyntheticQuery]:
        """Zero or more queries per passage."""
        ...


def _stable(*parts: str) -> int:
    return int(hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:8], 16)


def _heading(title: str) -> tuple[str, str]:
    """(page title, most specific meaningful heading) of a "Page > Section > Sub" title."""
    parts = [p.strip() for p in title.split(">") if p.strip()]
    if not parts:
        return "", ""
    page = parts[0]
    for part in reversed(parts):
        clean = _NUMBERING.sub("", part).strip(" :.-")
        if clean and clean.lower() not in _GENERIC and not re.fullmatch(r"[\W\d_]+", clean):
            return page, clean
    return page, _NUMBERING.sub("", page).strip(" :.-")


def _first_sentence(text: str, max_words: int) -> str:
    for para in text.split("\n"):
        para = para.strip(" -*\t")
        if len(para.split()) >= 5:
            sentence = _SENTENCE.split(para, maxsplit=1)[0]
            words = _WORD.findall(sentence)[:max_words]
            return " ".join(words).rstrip(".,;:")
    return ""


class HeuristicQueryGenerator:
    """Questions from section titles and first sentences; no model needed.

    For each passage: a question built from its most specific meaningful heading (template chosen
    by a stable hash of the doc_id, so reruns give the same data) and, when ``first_sentence``, a
    keyword query from the passage's first sentence.
    """

    name = "heuristic"
    _TEMPLATES = (
        "What is {h}?",
        "How does {h} work?",
        "How do I use {h}?",
        "Tell me about {h}",
        "{h}: what should I know?",
        "Where can I find information on {h}?",
    )
    _GERUND = re.compile(r"^(?P<verb>[A-Za-z]+ing)\b\s*(?P<rest>.*)$")

    def __init__(self, *, title: bool = True, first_sentence: bool = True, max_words: int = 14) -> None:
        self.title = title
        self.first_sentence = first_sentence
        self.max_words = max_words

    def title_question(self, p: Passage) -> str:
        """A question from the passage's heading ("" when it has none worth asking about)."""
        page, heading = _heading(p.title)
        if not heading or len(heading) > 120:
            return ""
        gerund = self._GERUND.match(heading)
        if gerund and gerund.group("rest"):
            return f"How do I go about {heading[0].lower() + heading[1:]}?"
        if heading.endswith("?"):
            return heading
        template = self._TEMPLATES[_stable(p.doc_id) % len(self._TEMPLATES)]
        q = template.format(h=heading)
        if page and page != heading and _stable(p.doc_id, "page") % 2 == 0 and len(page) < 60:
            q = f"{q.rstrip('?')} in {page}?" if q.endswith("?") else f"{q} ({page})"
        return q

    def generate(self, passages: Iterable[Passage]) -> Iterator[SyntheticQuery]:
        for p in passages:
            if self.title:
                q = self.title_question(p)
                if q:
                    yield SyntheticQuery(q, p.doc_id, p.domain, "heuristic:title")
            if self.first_sentence:
                s = _first_sentence(p.text, self.max_words)
                if s:
                    yield SyntheticQuery(s, p.doc_id, p.domain, "heuristic:first-sentence")


# Questions about the text instead of the product (small models write them despite the prompt).
_META = re.compile(r"\b(?:the|this|above|given) (?:passage|text|document|documentation|excerpt)\b|\bthe above\b", re.I)


def clean_generated_question(text: str) -> str:
    """The first usable question line of an LLM completion ("" when there is none).

    Drops list markers and "Question:" prefixes, and lines that ask about "the passage" rather
    than the product.
    """
    for line in text.strip().splitlines():
        line = re.sub(r"^\s*(?:question\s*[:\-]|q\s*[:\-]|[0-9]+[.)]|[-*])\s*", "", line.strip(), flags=re.I).strip(" \"'")
        if len(line.split()) >= 3 and not line.lower().startswith(("answer", "passage", "here is", "sure")) and not _META.search(line):
            return line[:300]
    return ""


class LLMQueryGenerator:
    """Questions written by an LLM with the paper's query-generation prompt (appendix B, Figure 5).

    Works with any backend of the LLM interface: an OpenAI-compatible endpoint or the embedded
    model. Passages whose completion fails or holds no usable question are skipped (counted in
    ``failures``).
    """

    def __init__(self, llm: LLM, *, max_tokens: int = 48, timeout_s: float = 60.0, product_names: dict[str, str] | None = None) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.product_names = product_names or {}
        self.name = f"llm:{llm.name}"
        self.failures = 0

    def generate(self, passages: Iterable[Passage]) -> Iterator[SyntheticQuery]:
        for p in passages:
            prompt = query_generation_prompt(product=self.product_names.get(p.domain, p.domain), title=p.title, passage=p.text)
            try:
                raw = self.llm.complete(prompt, max_tokens=self.max_tokens, stop=["\n\n"], timeout_s=self.timeout_s)
            except LLMError as exc:
                self.failures += 1
                log.warning("query generation failed for %s: %s", p.doc_id, exc)
                continue
            q = clean_generated_question(raw)
            if not q:
                self.failures += 1
                continue
            yield SyntheticQuery(q, p.doc_id, p.domain, self.name)
