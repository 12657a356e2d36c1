"""A page read into its main content: headings, prose paragraphs and code blocks, in reading order.

Every reader (:mod:`indexes.html`, :mod:`indexes.markup`) turns a page into a :class:`PageDoc`; :mod:`indexes.segment`
cuts it into sections and passages the same way whatever the page's format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class BlockKind(str, Enum):
    """What a block of a page is."""

    HEADING = "heading"  # a heading element's text (``level`` 1..7)
    PROSE = "prose"  # a paragraph, list item or table cell: white space collapsed to single spaces
    CODE = "code"  # a code block: its line breaks kept


@dataclass(frozen=True)
class Block:
    """One block of a page's main content."""

    kind: BlockKind
    text: str
    level: int = 0


@dataclass
class PageDoc:
    """A page's title and main content; ``dropped_chars``: characters of text removed as page furniture
    (navigation, sidebars, tables of contents, link lists); ``redirect``: where a page that only sends its reader on
    (an HTML ``<meta http-equiv="refresh">``) points, its content left unread."""

    title: str | None
    blocks: list[Block] = field(default_factory=list)
    kept_chars: int = 0
    dropped_chars: int = 0
    redirect: str | None = None

    def add(self, kind: BlockKind, text: str, level: int = 0) -> None:
        """Append a block (empty text is ignored)."""
        if text.strip():
            self.blocks.append(Block(kind, text, level))
            self.kept_chars += len(text)
