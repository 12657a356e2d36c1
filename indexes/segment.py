"""Segment pages at their headers and split long sections hierarchically (MKP-QA, section 4.2).

A section longer than ``max_tokens`` (of the retriever's tokenizer) is split at paragraph
boundaries, a paragraph that is still too long at sentence boundaries, and a sentence that
is still too long at word boundaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from bs4 import BeautifulSoup

from service.text import SENTENCE_END

_ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BLOCK_TAGS = ["p", "li", "pre", "blockquote", "dd", "dt", "tr", "table", "div", "section", "article", "br"]


@dataclass(frozen=True)
class Section:
    """A titled part of a page; ``title`` is 'Page title > Heading > Sub-heading'."""

    title: str
    text: str


def segment_markdown(text: str, fallback_title: str) -> list[Section]:
    """Sections at ATX headers (``#`` .. ``######``), ignoring headers inside code fences."""
    page_title = fallback_title
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    buf: list[str] = []
    in_fence = False

    def title() -> str:
        parts = [page_title] + [h for lvl, h in stack if not (lvl == 1 and h == page_title)]
        return " > ".join(parts)

    def flush() -> None:
        body = "\n".join(buf).strip()
        if body:
            sections.append(Section(title(), body))
        buf.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _ATX.match(line)
        if m:
            flush()
            level, heading = len(m.group(1)), m.group(2).strip()
            if level == 1 and not stack and not sections:
                page_title = heading
            stack = [(lvl, h) for lvl, h in stack if lvl < level] + [(level, heading)]
        else:
            buf.append(line)
    flush()
    return sections


def html_to_markdown(html: str) -> tuple[str, str | None]:
    """Headings become ATX headers, blocks become paragraphs; scripts and navigation are dropped."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "nav", "header", "footer", "noscript"]):
        tag.decompose()
    page_title = soup.title.get_text(" ", strip=True) if soup.title else None
    if soup.title:
        soup.title.decompose()
    for level in range(1, 7):
        for h in soup.find_all(f"h{level}"):
            h.replace_with(f"\n\n{'#' * level} {h.get_text(' ', strip=True)}\n\n")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    text = soup.get_text()
    paragraphs = [re.sub(r"[ \t\r\f\v]+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paragraphs if p), page_title


def segment_html(html: str, fallback_title: str) -> list[Section]:
    """Sections at ``<h1>``..``<h6>``."""
    md, page_title = html_to_markdown(html)
    sections = segment_markdown(md, page_title or fallback_title)
    return sections


def segment_text(text: str, fallback_title: str) -> list[Section]:
    """A plain-text page is one section (split later by size)."""
    body = text.strip()
    return [Section(fallback_title, body)] if body else []


def _pack(units: list[str], sep: str, count: Callable[[str], int], max_tokens: int, finer: Callable[[str], list[str]]) -> list[str]:
    chunks: list[str] = []
    cur: list[str] = []
    for unit in units:
        if count(unit) > max_tokens:
            if cur:
                chunks.append(sep.join(cur))
                cur = []
            chunks.extend(finer(unit))
            continue
        if cur and count(sep.join(cur + [unit])) > max_tokens:
            chunks.append(sep.join(cur))
            cur = []
        cur.append(unit)
    if cur:
        chunks.append(sep.join(cur))
    return chunks


def split_section(text: str, count_tokens: Callable[[str], int], max_tokens: int) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens: paragraphs, then sentences, then words."""
    text = text.strip()
    if not text:
        return []
    if count_tokens(text) <= max_tokens:
        return [text]

    def by_words(sentence: str) -> list[str]:
        return _pack(sentence.split(), " ", count_tokens, max_tokens, lambda w: [w])

    def by_sentences(paragraph: str) -> list[str]:
        return _pack([s for s in SENTENCE_END.split(paragraph) if s.strip()], " ", count_tokens, max_tokens, by_words)

    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    return _pack(paragraphs, "\n\n", count_tokens, max_tokens, by_sentences)
