"""Read an HTML page as published into its main content (:class:`~indexes.document.PageDoc`).

Structure-aware rules, measured on Sphinx, DocBook, MkDocs, LaTeX2HTML, man2html, Texinfo and haproxy-dconv output
(``benchmarks/manuals.py`` reports what they leave); XHTML pages that open with an XML declaration (DocBook's XSL
stylesheets write them) are read as HTML:

- **Page furniture is dropped**: ``<nav>``, ``<header>``, ``<footer>``, ``<aside>``, forms, scripts, dialogs, any
  element marked ``aria-hidden="true"``, and any element whose class, id or role names navigation
  (:data:`FURNITURE`: navbars, sidebars, breadcrumbs, "related" bars, tables of child links, drop-down menus, "edit
  this page", header links and their pilcrows, a theme's search and shortcut dialogs). Then any list, table
  or paragraph that is mostly link labels (:data:`MAX_LINK_SHARE` of its text, e.g. a table of contents, an index,
  "Next / Up / Previous") is dropped too.
- **Headings come from heading elements only** (``<h1>``..``<h6>``, and haproxy-dconv's keyword entries), and from
  a man page's section names (a bold, upper-case line at the start of a ``<pre>`` line, as man2html writes them);
  never from text inside code, so a ``# comment`` in an example stays in its example.
- **Code blocks** (``<pre>``) keep their line breaks and stay one block. A ``<pre>`` that holds hard-wrapped prose
  (a man page, haproxy-dconv's ``pre.text``) is cut at blank lines, and each paragraph of even indentation is
  re-flowed into one line; indented examples stay code. A paragraph of a ``<pre>`` whose lines are mostly one link
  each (an index of keywords, as haproxy-dconv sets them) is navigation and dropped, like a list of links.
- **A redirect is no page**: a page whose ``<meta http-equiv="refresh">`` sends the reader to another URL (Texinfo
  writes one per node kept in another node's file) is left unread, with where it points.
- **Prose** (paragraphs, list items, cells) has its white space collapsed to single spaces: the source's line
  breaks are not sentence ends. ``<br>`` is kept as a line break.
"""

from __future__ import annotations

import re

import lxml.html
from lxml import etree

from indexes.document import Block, BlockKind, PageDoc

# Element names dropped with their content: never part of a page's main text.
_DROP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "nav",
        "header",
        "footer",
        "aside",
        "form",
        "button",
        "select",
        "input",
        "textarea",
        "iframe",
        "dialog",
        "svg",
        "template",
        "head",
        "title",
    }
)
# Class, id and role tokens (lower-case, '-' and '_' removed) that name page furniture in common documentation
# generators: Sphinx (related, sphinxsidebar, headerlink, footer), MkDocs (md-header, md-sidebar, md-nav, md-footer;
# its themes' search and keyboard-shortcut dialogs: modal, role dialog), DocBook (navheader, navfooter, toc),
# LaTeX2HTML (navigation, CHILD_LINKS, ChildLinks), haproxy-dconv (navbar, sidebar, dropdown-menu), Read the Docs
# (wy-nav-*, rst-footer-buttons), Texinfo (copiable-anchor, copiable-link: the pilcrow after a definition or heading),
# Doxygen (titlearea: the project's name and number atop every page, main-nav, navpath), Javadoc (inherited-list: a
# class page's "Methods inherited from class X" names; :func:`_javadoc_inherited` for its older markup) and generic
# sites (breadcrumbs, edit links).
FURNITURE = frozenset(
    {
        "nav", "navbar", "navigation", "navheader", "navfooter", "navbarheader", "sidebar", "sphinxsidebar",
        "sphinxsidebarwrapper", "related", "breadcrumb", "breadcrumbs", "footer", "dropdownmenu", "menu", "headerlink",
        "childlinks", "toc", "toctree", "localtoc", "pagination", "skiplink", "searchbox", "search", "editthispage",
        "editpage", "mdheader", "mdfooter", "mdsidebar", "mdnav", "mdsearch", "mdsource", "mdtop", "wynavside",
        "wynavtop", "rstfooterbuttons", "bdsidebar", "bdtoc", "prevnext", "banner", "contentinfo", "complementary",
        "copiableanchor", "copiablelink", "modal", "dialog", "alertdialog", "titlearea", "navpath", "mainnav",
        "inheritedlist",
    }
)  # fmt: skip
# A list, table or paragraph whose link labels are at least this share of its text is navigation (jusText's and
# readability's link-density rule); a stated rule of the reader, not a number fitted on data.
MAX_LINK_SHARE = 0.5
_LINK_CONTAINERS = ("ul", "ol", "dl", "table", "menu", "p", "center", "div", "li", "dd", "td")
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "li", "ul", "ol", "dl", "dd", "dt", "blockquote", "td", "th", "tr", "table", "thead", "tbody",
        "section", "article", "main", "body", "center", "figure", "figcaption", "caption", "address", "hr", "fieldset",
        "details", "summary", "html",
    }
)  # fmt: skip
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
KEYWORD_LEVEL = 7  # haproxy-dconv's keyword entries: one level below the deepest heading element
_BR = "\u2028"  # a <br> while white space is collapsed; a line break after
_SPACE = re.compile(r"[^\S\u2028]+")
_PILCROW = re.compile(r"[¶§]")
# An XML declaration (XHTML, as DocBook's XSL stylesheets write it): lxml refuses a str that starts with one.
_XML_DECLARATION = re.compile(r"^\ufeff?\s*<\?xml[^>]*\?>")
_TEXINFO_MANUAL = re.compile(r"\s+\([^()]+\)$")  # a Texinfo page title's manual part, "Node (Manual Title)"
_REFRESH_URL = re.compile(r"url\s*=\s*(\S.*)$", re.IGNORECASE)
# A page title's site part: "Page — Product 1.2 documentation", "Page | Site", "Page - Product Manual".
_SITE_SUFFIX = re.compile(
    r"^(?P<page>.+?)\s+(?:[—–|»·]|-{1,2})\s+(?P<site>[^—–|»·]*?(?:documentation|docs|manual|handbook|reference|guide|wiki"
    r"|\bv?\d+(?:\.\d+)+)[^—–|»·]*)$",
    re.IGNORECASE,
)
_VERSION = re.compile(r"\s+(?:version\s+)?v?\d+(?:\.\d+)+\S*$", re.IGNORECASE)
_BULLET_MARK = re.compile(r"^[-*+\u2022]\s+")
_MAN_HEADING = re.compile(r"^[A-Z][A-Z0-9 ,/&()-]*[A-Z)]$")


def clean_title(title: str) -> str:
    """A heading or page title without pilcrows, runs of white space or a site suffix ("— X documentation")."""
    title = " ".join(_PILCROW.sub(" ", title).split())
    m = _SITE_SUFFIX.match(title)
    title = m.group("page").strip() if m else title
    return _VERSION.sub("", title) or title


def _tokens(el: etree._Element) -> set[str]:
    """The element's class, id and role tokens, lower-case, without '-' and '_'."""
    raw = " ".join(str(el.get(a) or "") for a in ("class", "id", "role"))
    return {t.lower().replace("-", "").replace("_", "") for t in raw.split()}


def _text_len(el: etree._Element) -> int:
    return len("".join(el.itertext()).split()) and len(" ".join("".join(el.itertext()).split()))


def _javadoc_inherited(el: etree._Element) -> bool:
    """A list item of Javadoc 8-16's class page opening with the anchor of a "Methods inherited from class X" list
    (``<li class="blockList"><a id="methods.inherited.from.class.java.lang.Object">``): the names of another class's
    members, repeated on every page of a class that inherits them."""
    first = el[0] if len(el) else None
    return (
        first is not None
        and isinstance(first.tag, str)
        and first.tag.lower() == "a"
        and any("inheritedfrom" in t.replace(".", "") for t in _tokens(first))
    )


def _is_furniture(el: etree._Element) -> bool:
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag.lower() in _DROP_TAGS or (el.get("aria-hidden") or "").strip().lower() == "true":
        return True  # aria-hidden: not part of the page a reader is shown (a closed dialog, an icon)
    return bool(_tokens(el) & FURNITURE) or (tag.lower() == "li" and _javadoc_inherited(el))


#: Class tokens of an admonition box (DocBook XSL's ``div.note``, ``.tip``, ``.warning``, ``.caution``,
#: ``.important``; ``.admonition`` elsewhere): the heading that opens one ("Tip") labels a box inside a section.
ADMONITIONS = frozenset({"note", "tip", "warning", "caution", "important", "admonition"})


def _admonition_title(el: etree._Element) -> bool:
    """The heading that opens an admonition box: read as the box's label, not as a section (PostgreSQL's manual titled
    1,057 of its 8,400 passages "... > Note", "> Tip", "> Warning", the text after the box among them)."""
    parent = el.getparent()
    if parent is None or not _tokens(parent) & ADMONITIONS:
        return False
    first = next((c for c in parent if isinstance(c.tag, str)), None)
    return first is el


def _is_heading(el: etree._Element) -> bool:
    """A heading element (not an admonition's title), or haproxy-dconv's keyword entry (a ``div.keyword``)."""
    tag = el.tag.lower() if isinstance(el.tag, str) else ""
    return (tag in _HEADINGS and not _admonition_title(el)) or (tag == "div" and "keyword" in _tokens(el))


def _mostly_links(el: etree._Element) -> bool:
    """A list, table or paragraph whose text is mostly link labels (and that holds no code or heading)."""
    if el.find(".//pre") is not None or any(_is_heading(e) for e in el.iter()):
        return False
    total = _text_len(el)
    if total == 0:
        return False
    links = sum(_text_len(a) for a in el.iter("a") if a.get("href") is not None)
    return links >= MAX_LINK_SHARE * total


def _drop(el: etree._Element) -> int:
    """Remove ``el`` (keeping its tail text); the characters of text removed."""
    n = _text_len(el)
    el.drop_tree()
    return n


def strip_furniture(root: etree._Element) -> int:
    """Remove page furniture from ``root`` (see the module's rules); the characters of text removed."""
    dropped = 0
    for el in [e for e in root.iter() if isinstance(e.tag, str) and _is_furniture(e)]:
        if el.getparent() is not None and not any(_is_furniture(a) for a in el.iterancestors()):
            dropped += _drop(el)
    for el in [e for e in root.iter(*_LINK_CONTAINERS)]:
        if el.getparent() is not None and _mostly_links(el):
            dropped += _drop(el)
    return dropped


class _Walker:
    """Emits a page's blocks in reading order."""

    def __init__(self, doc: PageDoc) -> None:
        self.doc = doc
        self.buf: list[str] = []

    def flush(self) -> None:
        text = _SPACE.sub(" ", "".join(self.buf))
        lines = [" ".join(line.split()) for line in text.split(_BR)]
        self.doc.add(BlockKind.PROSE, "\n".join(line for line in lines if line))
        self.buf.clear()

    def walk(self, el: etree._Element) -> None:
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if _is_heading(el):
            self.flush()
            self.doc.add(BlockKind.HEADING, clean_title("".join(el.itertext())), _HEADINGS.get(tag, KEYWORD_LEVEL))
        elif tag == "pre":
            self.flush()
            _pre(self.doc, el)
        elif tag == "br":
            self.buf.append(_BR)
        elif tag:
            block = tag in _BLOCK_TAGS
            if block:
                self.flush()
            if el.text:
                self.buf.append(el.text)
            for child in el:
                self.walk(child)
            if block:
                self.flush()
        if el.tail:
            self.buf.append(el.tail)


def _man_headings(pre: etree._Element) -> set[str]:
    """The section names of a man page set in ``pre``: its bold, upper-case texts (NAME, SYNOPSIS, ...)."""
    return {t for b in pre.iter("b") if _MAN_HEADING.match(t := "".join(b.itertext()).strip())}


_BULLET = re.compile(r"^\s*(?:[-*\u2022+]|\d+[.)])\s")
_HYPHENATED = re.compile(r"(?<=[a-z])-\n(?=[a-z])")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _reflow(paragraph: list[str], base: int) -> Block:
    """A paragraph of prose set in lines: prose when it starts at the text's ``base`` indentation and its lines share
    one indentation, or all but the first do (a hanging indent, as a man page's option entries), re-flowed with a line
    per list item and words hyphenated at line ends joined; else (an indented example) code."""
    indents = [_indent(line) for line in paragraph]
    hanging = len(set(indents[1:])) <= 1 and (len(indents) == 1 or indents[0] <= indents[1])
    if indents[0] > base or not hanging:
        return Block(BlockKind.CODE, "\n".join(line.rstrip() for line in paragraph))
    items: list[list[str]] = []
    for n, line in enumerate(paragraph):
        if n == 0 or _BULLET.match(line):
            items.append([])
        items[-1].append(line.strip())
    lines = [" ".join(" ".join(_HYPHENATED.sub("", "\n".join(item)).split("\n")).split()) for item in items]
    return Block(BlockKind.PROSE, "\n".join(lines))


def reflow_paragraphs(text: str, headings: frozenset[str] = frozenset()) -> list[Block]:
    """Text set in lines (plain text, a man page, haproxy-dconv's ``pre.text``) cut at blank lines, each paragraph
    re-flowed (:func:`_reflow`) against the text's least indentation; a line at the margin that is one of
    ``headings`` is a heading."""
    runs: list[list[str] | str] = []
    paragraph: list[str] = []
    for line in [*text.replace("\r", "").expandtabs().split("\n"), ""]:
        stripped = line.strip()
        if stripped and not (stripped in headings and not line[:1].isspace()):
            paragraph.append(line)
            continue
        if paragraph:
            runs.append(paragraph)
            paragraph = []
        if stripped:
            runs.append(stripped)
    base = min((_indent(r[0]) for r in runs if isinstance(r, list)), default=0)
    return [Block(BlockKind.HEADING, r.title() if r.isupper() else r, 2) if isinstance(r, str) else _reflow(r, base) for r in runs]


def _link_line(line: str, labels: set[str]) -> bool:
    return _BULLET_MARK.sub("", line.strip()).strip() in labels


def _without_link_lists(text: str, labels: set[str]) -> tuple[str, int]:
    """``text`` without its paragraphs (runs between blank lines, of 3+ lines) whose lines are mostly
    (:data:`MAX_LINK_SHARE`) one of ``labels`` each; the characters removed."""
    if not labels:
        return text, 0
    kept: list[str] = []
    dropped = 0
    for paragraph in re.split(r"(\n[ \t]*\n)", text):
        lines = [line for line in paragraph.split("\n") if line.strip()]
        if len(lines) >= 3 and sum(_link_line(line, labels) for line in lines) >= MAX_LINK_SHARE * len(lines):
            dropped += len(" ".join(paragraph.split()))
            continue
        kept.append(paragraph)
    return "".join(kept), dropped


def _pre(doc: PageDoc, pre: etree._Element) -> None:
    """A ``<pre>``: a code block, or (a man page, haproxy-dconv text) headings and re-flowed paragraphs; its
    paragraphs of link lines dropped (:func:`_without_link_lists`)."""
    labels = {t for a in pre.iter("a") if a.get("href") is not None and (t := " ".join("".join(a.itertext()).split()))}
    text, dropped = _without_link_lists("".join(pre.itertext()).replace("\r", ""), labels)
    doc.dropped_chars += dropped
    headings = _man_headings(pre)
    if "text" in _tokens(pre) or headings:
        for block in reflow_paragraphs(text, frozenset(headings)):
            doc.add(block.kind, block.text, block.level)
        return
    lines = text.strip("\n").split("\n")
    doc.add(BlockKind.CODE, "\n".join(line.rstrip() for line in lines))


def _redirect(root: etree._Element) -> str | None:
    """Where a ``<meta http-equiv="refresh" content="N; url=...">`` sends the reader (None: the page is no redirect).
    Texinfo writes one such page per node that shares another node's file ("The node you are looking for is at
    ..."); Sphinx, MkDocs and Javadoc redirects look the same."""
    for meta in root.iter("meta"):
        if (meta.get("http-equiv") or "").strip().lower() == "refresh" and (m := _REFRESH_URL.search(meta.get("content") or "")):
            return m.group(1).strip().strip("'\"")
    return None


def _made_by_texinfo(root: etree._Element) -> bool:
    """Whether ``makeinfo`` (``texi2any``) wrote the page: it titles each page "Node (Manual Title)"."""
    return any(
        (meta.get("name") or "").strip().lower() == "generator" and (meta.get("content") or "").strip().lower() in ("makeinfo", "texi2any")
        for meta in root.iter("meta")
    )


def read_html(raw: str) -> PageDoc:
    """The title and main content of an HTML page."""
    try:
        root = lxml.html.document_fromstring(_XML_DECLARATION.sub("", raw, count=1))
    except (etree.ParserError, ValueError):
        return PageDoc(title=None)
    title_el = root.find(".//title")
    title = clean_title(title_el.text_content()) if title_el is not None else ""
    if _TEXINFO_MANUAL.search(title) and _made_by_texinfo(root):
        title = _TEXINFO_MANUAL.sub("", title)  # "Invoking diff (Comparing and Merging Files)": the node's name
    if (target := _redirect(root)) is not None:
        return PageDoc(title=title or None, redirect=target)
    etree.strip_elements(root, etree.Comment, with_tail=False)
    doc = PageDoc(title=title or None)
    doc.dropped_chars = strip_furniture(root)
    walker = _Walker(doc)
    body = root.find("body")
    walker.walk(body if body is not None else root)
    walker.flush()
    if not doc.title:
        first = next((b.text for b in doc.blocks if b.kind is BlockKind.HEADING), None)
        doc.title = first
    return doc
