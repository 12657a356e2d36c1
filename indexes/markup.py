"""Read a page of any supported format into its main content (:class:`~indexes.document.PageDoc`).

HTML is read by :mod:`indexes.html`; Markdown (CommonMark and tables, by markdown-it-py) and reStructuredText (by
docutils, with file inclusion and raw HTML off) are rendered to HTML and read the same way. A Markdown page's front
matter (the YAML between ``---`` lines that Jekyll, Hugo, MkDocs and Docusaurus read, or Hugo's TOML between ``+++``
lines; by python-frontmatter) is not text: its ``title`` is the page's title. A PDF's text layer is read by
pdfminer.six, a text block per paragraph, and cut into sections at its bookmarks (read by pypdf), without its running
heads, page numbers, contents pages and front matter. Plain text is cut at blank lines, as a prose ``<pre>`` is.
"""

from __future__ import annotations

import html
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

from indexes.document import BlockKind, PageDoc
from indexes.html import clean_title, read_html, reflow_paragraphs


class PageKind(str, Enum):
    """A page format fedqa reads."""

    HTML = "html"
    MARKDOWN = "markdown"
    RST = "rst"
    PDF = "pdf"
    TEXT = "text"


PAGE_SUFFIXES: dict[str, PageKind] = {
    ".html": PageKind.HTML,
    ".htm": PageKind.HTML,
    ".xhtml": PageKind.HTML,
    ".md": PageKind.MARKDOWN,
    ".markdown": PageKind.MARKDOWN,
    ".rst": PageKind.RST,
    ".rest": PageKind.RST,
    ".pdf": PageKind.PDF,
    ".txt": PageKind.TEXT,
}


class UnreadablePage(ValueError):
    """A page of a supported format that yields no text; the message is the reason, ``dropped_chars`` the page
    furniture it held."""

    def __init__(self, reason: str, dropped_chars: int = 0) -> None:
        super().__init__(reason)
        self.dropped_chars = dropped_chars


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


if sys.version_info >= (3, 11):
    import tomllib

    _toml_loads: Callable[[str], dict[str, Any]] | None = tomllib.loads
else:  # Python 3.10 has no TOML reader: Hugo's TOML front matter is then read as text
    _toml_loads = None


@lru_cache(maxsize=1)
def _toml_handler() -> Any:  # noqa: ANN401 - a python-frontmatter BaseHandler (imported only when a page has one)
    """Front matter between ``+++`` lines read by ``tomllib`` (python-frontmatter's own TOML handler needs the
    unmaintained ``toml`` package)."""
    from frontmatter.default_handlers import BaseHandler

    class TomlHandler(BaseHandler):
        FM_BOUNDARY = re.compile(r"^\+{3}\s*$", re.MULTILINE)
        START_DELIMITER = END_DELIMITER = "+++"

        def load(self, fm: str, **kwargs: object) -> dict[str, Any]:
            if _toml_loads is None:
                raise ValueError("no TOML reader")
            return _toml_loads(fm)

    return TomlHandler()


def _front_matter(text: str) -> tuple[str | None, str]:
    """A Markdown page's front matter title (None: none given) and the text after its front matter; a page whose front
    matter does not parse is read whole."""
    body = text.lstrip("\ufeff")
    if not body.startswith(("---", "+++")):
        return None, text
    import frontmatter

    try:
        post = frontmatter.loads(body, handler=_toml_handler() if body.startswith("+++") else None)
    except Exception:  # noqa: BLE001 - a YAML or TOML error of any kind: the page is read as written
        return None, text
    title = post.metadata.get("title")
    return (str(title).strip() or None) if isinstance(title, str | int | float) else None, post.content


def _markdown(text: str) -> PageDoc:
    from markdown_it import MarkdownIt

    title, body = _front_matter(text)
    head = f"<head><title>{html.escape(title)}</title></head>" if title else ""
    return read_html(f"<html>{head}<body>{MarkdownIt('commonmark').enable('table').render(body)}</body></html>")


def _rst(text: str, source: str) -> PageDoc:
    from docutils.core import publish_parts

    overrides = {"report_level": 5, "halt_level": 5, "file_insertion_enabled": False, "raw_enabled": False, "_disable_config": True}
    try:
        parts = publish_parts(source=text, source_path=source, writer_name="html5", settings_overrides=overrides)
    except Exception as exc:  # docutils raises its own SystemMessage and others on malformed input
        raise UnreadablePage(f"reStructuredText could not be parsed: {exc}") from None
    doc = read_html(f"<html><head><title>{parts.get('title', '')}</title></head><body>{parts['html_body']}</body></html>")
    return doc


@dataclass(frozen=True)
class _OutlineEntry:
    page: int
    level: int
    title: str


def _outline(reader: Any) -> list[_OutlineEntry]:  # noqa: ANN401 - a pypdf PdfReader
    """The PDF's bookmarks (its outline) in reading order, each with its page and depth (1: a chapter)."""
    entries: list[_OutlineEntry] = []

    def walk(items: list[Any], level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # noqa: BLE001 - a bookmark pointing nowhere is left out
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            if title and page is not None and page >= 0:
                entries.append(_OutlineEntry(page, level, title))

    try:
        walk(list(reader.outline), 1)
    except Exception:  # noqa: BLE001 - a malformed outline: the text is still read, without sections
        return []
    return entries


#: A monospaced font's name (after a subset's ``ABCDEF+`` prefix): DejaVu Sans Mono, Courier, TeX's typewriter fonts
#: (cmtt, ectt, lmmono, txtt), Consolas, Menlo, Inconsolata, Source Code Pro, Fira Code...
_MONOSPACE = re.compile(r"mono|courier|typewriter|consola|menlo|inconsolata|code|^(?:cm|ec|tc|sf|tx)tt|^pcr", re.IGNORECASE)


@dataclass(frozen=True)
class _Box:
    """A text block of a PDF page (pdfminer.six's layout analysis: a paragraph, a heading, a running head, a code
    listing); ``code``: most of its characters are in a monospaced font."""

    text: str
    code: bool = False


def _monospaced(fontname: str) -> bool:
    return bool(_MONOSPACE.search(fontname.rpartition("+")[2]))


def _page_boxes(path: Path) -> list[list[_Box]]:
    """Each page's text blocks in reading order."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar, LTTextContainer

    def box(el: LTTextContainer, text: str) -> _Box:
        fonts = [
            ch.fontname for line in el if isinstance(line, LTTextContainer) for ch in line if isinstance(ch, LTChar) and not ch.get_text().isspace()
        ]
        return _Box(text, bool(fonts) and 2 * sum(map(_monospaced, fonts)) > len(fonts))

    return [
        [box(el, text) for el in page if isinstance(el, LTTextContainer) and (text := el.get_text().strip())] for page in extract_pages(str(path))
    ]


_DIGITS = re.compile(r"\d+")
_LEADERS = re.compile(r"(?:\.\s?){4,}")
_NUMBERING = re.compile(r"^(?:(?i:chapter|section|appendix)\s+)?(?:\d+|[A-Z])(?:\.\d+)*\.?\s+")
#: boxes at each end of a page where running heads and feet are looked for
_EDGE = 2


def _key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _at_edge(i: int, boxes: list[_Box]) -> bool:
    return i < _EDGE or i >= len(boxes) - _EDGE


def _opens(box: str, entry: _OutlineEntry) -> bool:
    """Whether the text block ``box`` opens with the bookmark's title, numbered ("5.4.2 Description of a copy") or not."""
    line = _key(_NUMBERING.sub("", box.splitlines()[0] if box else ""))
    return bool(line) and line in (_key(entry.title), _key(_NUMBERING.sub("", entry.title)))


def _running_lines(pages: list[list[_Box]]) -> set[str]:
    """Lines (digits as one mark) at the top or foot of at least half of the pages, of four or more: running heads
    and feet, page numbers ("22 / 92"). A line repeated inside pages (a code example's closing brace) is not one."""
    if len(pages) < 4:
        return set()
    seen: Counter[str] = Counter()
    for boxes in pages:
        seen.update(
            {_DIGITS.sub("#", line.strip()) for i, box in enumerate(boxes) if _at_edge(i, boxes) for line in box.text.splitlines() if line.strip()}
        )
    return {line for line, n in seen.items() if 2 * n >= len(pages)}


def _heads(entries: list[_OutlineEntry], boxes: list[str]) -> dict[int, list[_OutlineEntry]]:
    """Where each bookmark of a page starts: the first box (from the previous one's) whose first line is its title,
    numbered or not; the page's first box when none is."""
    at: dict[int, list[_OutlineEntry]] = {}
    start = 0
    for entry in entries:
        found = next((i for i in range(start, len(boxes)) if _opens(boxes[i], entry)), None)
        if found is not None:
            start = found
        at.setdefault(start, []).append(entry)
    return at


def _goes_on(before: str, after: str) -> bool:
    """Whether the text block ``after`` goes on with ``before`` (a sentence cut by a page break, or by the layout
    analysis at a change of line spacing: no sentence end before it, a lower-case word after it)."""
    end, start = before.rstrip()[-1:], after.lstrip()[:1]
    return bool(end) and end not in ".!?:;" and start.islower()


def _pdf(path: Path) -> PageDoc:
    """A PDF's text layer (pdfminer.six: pypdf ran words together on TeX-made PDFs, "Descriptionofacopy"), cut into
    sections at its bookmarks; running heads, page numbers, dot-leader lines (a table of contents) and the pages
    before the first bookmark (the front matter) dropped; a sentence cut between two text blocks (a page break) joined;
    a block mostly in a monospaced font kept as a code listing (its lines, not reflowed), with the next when it is one too."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            raise UnreadablePage("the PDF is encrypted")
        title = (reader.metadata.title if reader.metadata else None) or None
        outline = _outline(reader)
    except (PdfReadError, OSError, ValueError) as exc:
        raise UnreadablePage(f"the PDF could not be read: {exc}") from None
    try:
        pages = _page_boxes(path)
    except Exception as exc:  # noqa: BLE001 - pdfminer.six on a file pypdf accepted: any error skips this page alone
        raise UnreadablePage(f"the PDF's text could not be read: {type(exc).__name__}: {exc}") from None
    doc = PageDoc(title=clean_title(title) if title else None)
    running = _running_lines(pages)
    pages = _body_monospaced(pages)
    carry: _Box | None = None
    # pages before the first bookmark are front matter: the cover, copyright, revision history and contents
    front = min((e.page for e in outline), default=0)
    for number, boxes in enumerate(pages):
        if number < front:
            doc.dropped_chars += sum(len(box.text) for box in boxes)
            continue
        kept: list[_Box] = []
        for i, box in enumerate(boxes):
            lines = [line for line in box.text.splitlines() if not (_at_edge(i, boxes) and _DIGITS.sub("#", line.strip()) in running)]
            text = "\n".join(lines).strip()
            if text and 3 * sum(len(m) for m in _LEADERS.findall(text)) < len(text):  # not a contents line
                kept.append(_Box(text, box.code))
            else:
                text = ""
            doc.dropped_chars += len(box.text) - len(text)
        heads = _heads([e for e in outline if e.page == number], [b.text for b in kept])
        for i, box in enumerate(kept):
            text = box.text
            if carry is not None:  # the block before (on this page or the last): joined when this one goes on with it
                if not heads.get(i) and carry.code == box.code and (box.code or _goes_on(carry.text, text)):
                    text = f"{carry.text}\n{text}"  # a sentence cut, or a listing the layout analysis cut
                else:
                    _box_blocks(doc, carry)
                carry = None
            for entry in heads.get(i, []):
                doc.add(BlockKind.HEADING, entry.title, entry.level)
                if _opens(text, entry):
                    text = text.partition("\n")[2]
            carry = _Box(text, box.code)
    if carry is not None:
        _box_blocks(doc, carry)
    if not doc.blocks and pages:
        raise UnreadablePage("the PDF has no text layer (a scan?): fedqa does not run OCR")
    return doc


def _body_monospaced(pages: list[list[_Box]]) -> list[list[_Box]]:
    """The pages, with no block a code listing when most of the text is monospaced: the body itself is (a text file or
    an RFC printed to PDF), and listings cannot be told from it."""
    sizes = [(len(b.text), b.code) for boxes in pages for b in boxes]
    if 2 * sum(n for n, code in sizes if code) <= sum(n for n, _ in sizes):
        return pages
    return [[_Box(b.text) for b in boxes] for boxes in pages]


def _box_blocks(doc: PageDoc, box: _Box) -> None:
    """A PDF text block into the page: a code listing whole, its lines kept; prose reflowed into paragraphs."""
    if box.code:
        doc.add(BlockKind.CODE, box.text)
    else:
        _text_blocks(doc, box.text)


def _text_blocks(doc: PageDoc, text: str) -> None:
    for block in reflow_paragraphs(text):
        doc.add(block.kind, block.text)


def read_page(path: Path, kind: PageKind) -> PageDoc:
    """The main content of the page at ``path``; :class:`UnreadablePage` when it yields none."""
    if kind is PageKind.PDF:
        doc = _pdf(path)
    else:
        raw = _decode(path)
        if kind is PageKind.HTML:
            doc = read_html(raw)
        elif kind is PageKind.MARKDOWN:
            doc = _markdown(raw)
        elif kind is PageKind.RST:
            doc = _rst(raw, str(path))
        else:
            doc = PageDoc(title=None)
            _text_blocks(doc, raw)
    if doc.redirect is not None:
        raise UnreadablePage(f"a redirect to {doc.redirect}")
    if not any(b.kind is not BlockKind.HEADING for b in doc.blocks):
        reason = "only navigation or link lists" if doc.dropped_chars else "no text"
        raise UnreadablePage(reason, doc.dropped_chars)
    return doc
