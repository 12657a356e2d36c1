"""What a product's pages repeat: pages held twice (copies: the same bytes under another name, or a link to another
of its pages; translations: pages declaring another language than most of the product's pages do), and text most of
its pages hold (a site's tagline, a manual's footer).

Debian's ``apache2-doc`` is the first case: its manual has a folder per language, each holding every page, the
untranslated ones as links to the English folder's; read as one product it came 11 times over (2,685 pages, 42,269
passages of which 13,985 distinct), in eleven languages the English encoder does not read. SQLite's documentation is
the second: "Small. Fast. Reliable. Choose any three." heads 760 of its 766 pages.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from indexes.document import BlockKind, PageDoc
from indexes.markup import PAGE_SUFFIXES, PageKind

#: The language an HTML page declares on its root element (``<html lang="de">``, XHTML's ``xml:lang``): its primary
#: subtag, read from the page's first bytes.
_DECLARED = re.compile(rb"<html\b[^>]*?\b(?:xml:)?lang\s*=\s*[\"']?([A-Za-z]{2,3})(?:[-_][A-Za-z0-9]+)*", re.IGNORECASE)
_HEAD_BYTES = 4096


@dataclass(frozen=True)
class PageBytes:
    """What a page's bytes say about it, read once: their digest, and the language an HTML page declares."""

    digest: bytes
    language: str | None


def page_bytes(path: Path) -> PageBytes:
    raw = path.read_bytes()
    found = _DECLARED.search(raw[:_HEAD_BYTES]) if PAGE_SUFFIXES.get(path.suffix.lower()) is PageKind.HTML else None
    return PageBytes(hashlib.sha256(raw).digest(), found.group(1).decode("ascii").lower() if found else None)


def repeated_pages(files: list[Path], root: Path, domain: str) -> dict[Path, str]:
    """The pages among ``files`` (a product's, under ``root``) not to read, each with its reason: every copy but one
    (:func:`copies`), then the translations among the others (:func:`translations`, :func:`translated_folders`)."""
    read = {f: page_bytes(f) for f in files}
    skips = copies(read, root, domain)
    skips.update(translations({f: r.language for f, r in read.items() if f not in skips}))
    skips.update(translated_folders([f for f in files if f not in skips], root, domain))
    return skips


def copies(read: dict[Path, PageBytes], root: Path, domain: str) -> dict[Path, str]:
    """Pages with the same bytes as another: each group's first is read (a file before a link to one, then the
    shallowest, then by name) and the others skipped, naming it."""
    by_digest: dict[bytes, list[Path]] = {}
    for f, r in read.items():
        by_digest.setdefault(r.digest, []).append(f)
    skips: dict[Path, str] = {}
    for group in by_digest.values():
        if len(group) < 2:
            continue
        kept, *others = sorted(group, key=lambda f: (f.is_symlink(), len(f.relative_to(root).parts), f.as_posix()))
        name = f"{domain}/{kept.relative_to(root).as_posix()}"
        for f in others:
            linked = f.is_symlink() and f.resolve() == kept.resolve()
            skips[f] = f"a link to {name} (read there)" if linked else f"the same page as {name} (read there)"
    return skips


def translations(languages: dict[Path, str | None]) -> dict[Path, str]:
    """HTML pages declaring (``languages``: each page's, None when it declares none) another language than the one
    most of the product's pages declare, each with the reason; nothing when two languages are declared by as many
    pages (a product written in both is read whole)."""
    declared = {f: lang for f, lang in languages.items() if lang is not None}
    ranked = Counter(declared.values()).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return {}
    main, count = ranked[0]
    return {
        f: f"in {lang!r} (its <html lang>), a translation: {count} of the product's {len(declared)} pages are in {main!r} "
        "(a folder of its own is read as another product)"
        for f, lang in declared.items()
        if lang != main
    }


#: Text is site furniture when more than half of a product's pages hold it, and at least this many do.
FURNITURE_MIN_PAGES = 3
#: ... and it has at least this many words: shorter text repeated on most pages is a label of the page's own content
#: (a table's "Description:" and "Module Identifier:", an admonition's "Note", Javadoc's "Modifier and Type").
FURNITURE_MIN_WORDS = 4


def _said(text: str) -> str:
    return " ".join(text.split())


def site_furniture(docs: Sequence[PageDoc]) -> frozenset[str]:
    """The prose and code blocks (white space collapsed) that more than half of a product's pages ``docs`` hold, at
    least :data:`FURNITURE_MIN_PAGES` of them, each of at least :data:`FURNITURE_MIN_WORDS` words: a site's tagline
    (SQLite: 760 of 766 pages), a manual's footer (PuTTY's "If you want to provide feedback on this manual...", 20 of
    20; texi2any's "This document was generated on ..."), a suite's line (git's "Part of the git(1) suite", 194 of
    241). Headings are never furniture: they title the sections under them."""
    held = Counter(t for doc in docs for t in {_said(b.text) for b in doc.blocks if b.kind is not BlockKind.HEADING})
    return frozenset(t for t, n in held.items() if 2 * n > len(docs) and n >= FURNITURE_MIN_PAGES and len(t.split()) >= FURNITURE_MIN_WORDS)


def without_furniture(doc: PageDoc, furniture: frozenset[str], shown: set[str]) -> PageDoc:
    """``doc`` without its ``furniture`` blocks, but those no page read before it held (not in ``shown``, which it
    extends): such text is read once, as a copied page is."""
    if not furniture:
        return doc
    blocks, dropped = [], 0
    for b in doc.blocks:
        said = _said(b.text) if b.kind is not BlockKind.HEADING else None
        if said in furniture and said in shown:
            dropped += len(b.text)
            continue
        if said in furniture:
            shown.add(said)
        blocks.append(b)
    return PageDoc(doc.title, blocks, doc.kept_chars - dropped, doc.dropped_chars + dropped, doc.redirect)


#: A folder named as a language: an ISO 639 code, with a region or script after it (``de``, ``pt-BR``, ``zh_CN``).
_LANGUAGE_FOLDER = re.compile(r"^[a-z]{2,3}(?:[-_][a-z]{2,4})?$", re.IGNORECASE)
_ENGLISH_FOLDER = re.compile(r"^en(?:[-_][a-z]{2,4})?$", re.IGNORECASE)


def translated_folders(files: list[Path], root: Path, domain: str) -> dict[Path, str]:
    """Pages in a folder named as another language beside an English one (``en-US/`` beside ``de-DE/``, ``fr-FR/``,
    ... as Publican builds the Debian Administrator's Handbook, declaring no language in its pages), when the folder
    holds pages of the English folder's names (at least half of its own): the product is read in English, the
    language of the shipped encoder, each skipped page with its reason. Folders so named without an English sibling,
    or holding other pages, are read."""
    by_folder: dict[Path, set[Path]] = {}
    for f in files:
        rel = f.relative_to(root)
        for depth in range(len(rel.parts) - 1):
            folder = root.joinpath(*rel.parts[: depth + 1])
            by_folder.setdefault(folder, set()).add(f.relative_to(folder))
    skips: dict[Path, str] = {}
    for english in (d for d in by_folder if _ENGLISH_FOLDER.match(d.name)):
        pages = by_folder[english]
        for sibling, held in by_folder.items():
            if (
                sibling.parent != english.parent
                or sibling == english
                or not _LANGUAGE_FOLDER.match(sibling.name)
                or 2 * len(held & pages) < len(held)
            ):
                continue
            reason = f"a translation: in {sibling.name}/, beside {domain}/{english.relative_to(root).as_posix()}/ of the same pages (read there)"
            skips.update({sibling / page: reason for page in held})
    return skips
