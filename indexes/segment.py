"""Cut a page's main content (:class:`~indexes.document.PageDoc`) into passages (MKP-QA, section 4.2).

- A **section** starts at each heading; its title is the page title and the heading path ("Page > Chapter >
  Section"; a heading that repeats the page title is not repeated). Its heading is also the first line of its first
  passage, so the passage's text names what it is about.
- A section's blocks are packed into passages of at most ``max_tokens`` (of the retriever's tokenizer) without
  cutting a block; a block still too long is split: prose at sentence ends, then words; code at line breaks.
- **Fragments are merged**: a section with less than ``min_chars`` characters of text (a chapter heading and its one
  line of introduction, a stub page's note) joins the next section of its page (or the previous one, at the end);
  so does a passage under ``min_chars`` left over when a long section is packed (a "See also" line after a block
  that filled the passage before it), even when the joined passage is longer than ``max_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from indexes.document import Block, BlockKind, PageDoc
from service.text import SENTENCE_END


@dataclass(frozen=True)
class Section:
    """A titled part of a page; ``title`` is 'Page title > Heading > Sub-heading'."""

    title: str
    text: str


@dataclass(frozen=True)
class Segmentation:
    """How pages are cut: passages of at most ``max_tokens`` tokens; sections under ``min_chars`` merged."""

    count_tokens: Callable[[str], int]
    max_tokens: int
    min_chars: int = 0


@dataclass
class _Part:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def chars(self) -> int:
        return sum(len(b.text) for b in self.blocks if b.kind is not BlockKind.HEADING)


def _parts(doc: PageDoc, fallback_title: str) -> list[_Part]:
    """The page's sections, each with its heading block first."""
    page_title = doc.title or fallback_title
    stack: list[tuple[int, str]] = []
    parts = [_Part(page_title)]
    for block in doc.blocks:
        if block.kind is not BlockKind.HEADING:
            parts[-1].blocks.append(block)
            continue
        stack = [(lvl, h) for lvl, h in stack if lvl < block.level] + [(block.level, block.text)]
        path = [h for _, h in stack if h.casefold() != page_title.casefold()]
        parts.append(_Part(" > ".join([page_title, *path]), [block]))
    return [p for p in parts if p.chars() > 0]


def _merge_fragments(parts: list[_Part], min_chars: int) -> list[_Part]:
    """Sections under ``min_chars`` of text joined to the next section (the last one to the previous)."""
    out: list[_Part] = []
    pending: _Part | None = None
    for part in parts:
        if pending is not None:
            part = _Part(part.title, pending.blocks + part.blocks)
            pending = None
        if part.chars() < min_chars:
            pending = part
        else:
            out.append(part)
    if pending is not None:
        if out:
            out[-1] = _Part(out[-1].title, out[-1].blocks + pending.blocks)
        else:
            out.append(pending)
    return out


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


def _by_words(text: str, count: Callable[[str], int], max_tokens: int) -> list[str]:
    return _pack(text.split(), " ", count, max_tokens, lambda w: [w])


def _split_prose(text: str, count: Callable[[str], int], max_tokens: int) -> list[str]:
    """A paragraph too long for one passage, at sentence ends, then words."""
    sentences = [s for s in SENTENCE_END.split(text) if s.strip()]
    return _pack(sentences, " ", count, max_tokens, lambda s: _by_words(s, count, max_tokens))


def _split_code(text: str, count: Callable[[str], int], max_tokens: int) -> list[str]:
    """A code block too long for one passage, at line breaks (a single over-long line at words)."""
    return _pack(text.split("\n"), "\n", count, max_tokens, lambda line: _by_words(line, count, max_tokens))


def split_section(text: str, count_tokens: Callable[[str], int], max_tokens: int) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens: paragraphs, then sentences, then words."""
    text = text.strip()
    if not text:
        return []
    if count_tokens(text) <= max_tokens:
        return [text]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    return _pack(paragraphs, "\n\n", count_tokens, max_tokens, lambda p: _split_prose(p, count_tokens, max_tokens))


def _units(blocks: list[Block]) -> list[Block]:
    """The blocks to pack, a heading joined to the block after it (a heading never ends a passage alone)."""
    units: list[Block] = []
    heading: str | None = None
    for b in blocks:
        if b.kind is BlockKind.HEADING:
            heading = b.text if heading is None else f"{heading}\n\n{b.text}"
            continue
        units.append(Block(b.kind, b.text if heading is None else f"{heading}\n\n{b.text}"))
        heading = None
    if heading is not None:
        units.append(Block(BlockKind.PROSE, heading))
    return units


def _chunks(part: _Part, seg: Segmentation) -> list[str]:
    """A section's passages: its blocks packed whole, a block too long split by its kind."""

    def finer(unit: str) -> list[str]:
        kind = kinds.get(unit, BlockKind.PROSE)
        split = _split_code if kind is BlockKind.CODE else _split_prose
        return split(unit, seg.count_tokens, seg.max_tokens)

    units = _units(part.blocks)
    kinds = {b.text: b.kind for b in units}
    return _join_short(_pack([b.text for b in units], "\n\n", seg.count_tokens, seg.max_tokens, finer), seg.min_chars)


def _join_short(chunks: list[str], min_chars: int) -> list[str]:
    """Chunks under ``min_chars`` joined to the chunk before them (the first one to the chunk after it)."""
    out: list[str] = []
    for chunk in chunks:
        if out and (len(chunk) < min_chars or len(out[-1]) < min_chars):
            out[-1] = f"{out[-1]}\n\n{chunk}"
        else:
            out.append(chunk)
    return out


def sections(doc: PageDoc, fallback_title: str, min_chars: int = 0) -> list[Section]:
    """The page's sections (fragments under ``min_chars`` merged), each one text of its blocks."""
    return [Section(p.title, "\n\n".join(b.text for b in p.blocks)) for p in _merge_fragments(_parts(doc, fallback_title), min_chars)]


def passages(doc: PageDoc, fallback_title: str, seg: Segmentation) -> list[Section]:
    """The page cut into passages: (title, text) per passage, in page order."""
    return [Section(p.title, chunk) for p in _merge_fragments(_parts(doc, fallback_title), seg.min_chars) for chunk in _chunks(p, seg)]
