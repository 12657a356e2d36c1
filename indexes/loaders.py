"""Read documents: the JSONL exchange format, and folders of Markdown, HTML and text pages."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from indexes.segment import Section, segment_html, segment_markdown, segment_text, split_section
from service.jsonl import read_objects
from service.retrieval.passage import Passage

PAGE_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html", ".txt": "text"}
_DOMAIN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class LoadError(ValueError):
    """The input is not in a format fedqa reads; the message says where and why."""


def check_domain(name: str) -> str:
    """A domain name is lower-case letters, digits, '-' and '_' (it names a collection)."""
    if not _DOMAIN.match(name):
        raise LoadError(f"domain {name!r} must match {_DOMAIN.pattern} (lower-case letters, digits, '-', '_')")
    return name


def load_jsonl(path: Path, domain: str | None = None) -> Iterator[Passage]:
    """Passages from a ``docs.jsonl`` file (doc_id, domain, title, source, text); kept whole, as segmented."""
    try:
        records = list(read_objects(path))
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    for n, rec in records:
        missing = [k for k in ("doc_id", "text") if not isinstance(rec.get(k), str) or not rec.get(k)]
        dom = domain or rec.get("domain")
        if missing or not isinstance(dom, str):
            raise LoadError(f"{path}:{n}: missing {', '.join(missing) or 'domain'}")
        yield Passage(
            doc_id=rec["doc_id"],
            domain=check_domain(dom),
            title=str(rec.get("title") or rec["doc_id"]),
            source=str(rec.get("source") or path.name),
            text=rec["text"],
        )


_SEGMENTERS: dict[str, Callable[[str, str], list[Section]]] = {
    "markdown": segment_markdown,
    "html": segment_html,
    "text": segment_text,
}


@dataclass(frozen=True)
class Page:
    """One page file to load: its domain and its source, ``<domain>/<path>``."""

    path: Path
    domain: str
    source: str


def id_stems(pages: list[Page]) -> dict[Page, str]:
    """The doc_id stem of each page: its source without the extension, or with it where two pages of a domain
    share that stem (``guide.md`` and ``guide.html``: ``<domain>/guide.md#NNN`` and ``<domain>/guide.html#NNN``)."""
    seen: dict[tuple[str, str], Page] = {}
    for page in pages:
        if (page.domain, page.source) in seen and seen[(page.domain, page.source)].path != page.path:
            raise LoadError(f"{seen[(page.domain, page.source)].path} and {page.path} are both {page.source} in domain {page.domain!r}")
        seen[(page.domain, page.source)] = page
    by_stem = Counter((p.domain, p.source.rsplit(".", 1)[0]) for p in seen.values())
    return {p: p.source if by_stem[(p.domain, p.source.rsplit(".", 1)[0])] > 1 else p.source.rsplit(".", 1)[0] for p in seen.values()}


def load_page(page: Page, *, id_stem: str, count_tokens: Callable[[str], int], max_tokens: int) -> Iterator[Passage]:
    """Passages of one page (doc_id ``<id_stem>#NNN``): sections at its headers, long sections split to ``max_tokens``."""
    path = page.path
    kind = PAGE_SUFFIXES[path.suffix.lower()]
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raw = path.read_bytes().decode("latin-1")
    n = 0
    for section in _SEGMENTERS[kind](raw, path.stem):
        for chunk in split_section(section.text, count_tokens, max_tokens):
            yield Passage(doc_id=f"{id_stem}#{n:03d}", domain=page.domain, title=section.title, source=page.source, text=chunk)
            n += 1


def folder_pages(path: Path, *, domain: str | None) -> list[Page]:
    """Pages under ``path``: one sub-folder per domain, or the whole folder as ``domain`` when given."""
    if domain:
        roots = [(check_domain(domain), path)]
    else:
        roots = [(check_domain(d.name), d) for d in sorted(path.iterdir()) if d.is_dir() and not d.name.startswith(".")]
        if not roots:
            raise LoadError(f"{path}: expected one sub-folder per domain (or pass --domain NAME)")
    return [
        Page(f, dom, f"{dom}/{f.relative_to(root).as_posix()}")
        for dom, root in roots
        for f in sorted(root.rglob("*"))
        if f.is_file() and f.suffix.lower() in PAGE_SUFFIXES
    ]


def _pages_of(path: Path, domain: str | None) -> list[Page] | None:
    """The pages ``path`` names (a folder or one page), or None for a ``.jsonl`` file; LoadError for anything else."""
    if not path.exists():
        raise LoadError(f"{path}: no such file or folder")
    if path.is_dir():
        return folder_pages(path, domain=domain)
    if path.suffix.lower() == ".jsonl":
        return None
    if path.suffix.lower() in PAGE_SUFFIXES:
        if not domain:
            raise LoadError(f"{path}: a single page needs --domain NAME")
        return [Page(path, check_domain(domain), f"{domain}/{path.name}")]
    raise LoadError(f"{path}: unsupported file type (use .jsonl, .md, .html, .txt or a folder)")


def load_paths(paths: list[Path], *, domain: str | None, count_tokens: Callable[[str], int], max_tokens: int) -> Iterator[Passage]:
    """Passages from every path: ``.jsonl`` files, page files (need ``domain``) or folders.

    Every path is checked, and the pages' doc_ids chosen (:func:`id_stems`), before the first passage is read.
    """
    inputs = [(path, _pages_of(path, domain)) for path in paths]
    stems = id_stems([p for _, pages in inputs for p in pages or []])
    for path, pages in inputs:
        if pages is None:
            yield from load_jsonl(path, domain)
            continue
        for page in pages:
            yield from load_page(page, id_stem=stems[page], count_tokens=count_tokens, max_tokens=max_tokens)
