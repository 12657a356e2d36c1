"""Read documents: the JSONL exchange format, and folders of Markdown, HTML and text pages."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
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


def load_page(path: Path, *, domain: str, source: str, count_tokens: Callable[[str], int], max_tokens: int) -> Iterator[Passage]:
    """Passages of one page: sections at its headers, long sections split to ``max_tokens``."""
    kind = PAGE_SUFFIXES[path.suffix.lower()]
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raw = path.read_bytes().decode("latin-1")
    stem = source.rsplit(".", 1)[0]  # source is "<domain>/<path>", so doc_id is "<domain>/<path>#NNN"
    n = 0
    for section in _SEGMENTERS[kind](raw, path.stem):
        for chunk in split_section(section.text, count_tokens, max_tokens):
            yield Passage(doc_id=f"{stem}#{n:03d}", domain=domain, title=section.title, source=source, text=chunk)
            n += 1


def load_folder(path: Path, *, domain: str | None, count_tokens: Callable[[str], int], max_tokens: int) -> Iterator[Passage]:
    """Pages under ``path``: one sub-folder per domain, or the whole folder as ``domain`` when given."""
    if domain:
        roots = [(check_domain(domain), path)]
    else:
        roots = [(check_domain(d.name), d) for d in sorted(path.iterdir()) if d.is_dir() and not d.name.startswith(".")]
        if not roots:
            raise LoadError(f"{path}: expected one sub-folder per domain (or pass --domain NAME)")
    for dom, root in roots:
        for f in sorted(root.rglob("*")):
            if f.is_file() and f.suffix.lower() in PAGE_SUFFIXES:
                rel = f.relative_to(root).as_posix()
                yield from load_page(f, domain=dom, source=f"{dom}/{rel}", count_tokens=count_tokens, max_tokens=max_tokens)


def load_paths(paths: list[Path], *, domain: str | None, count_tokens: Callable[[str], int], max_tokens: int) -> Iterator[Passage]:
    """Passages from every path: ``.jsonl`` files, page files (need ``domain``) or folders."""
    for path in paths:
        if not path.exists():
            raise LoadError(f"{path}: no such file or folder")
        if path.is_dir():
            yield from load_folder(path, domain=domain, count_tokens=count_tokens, max_tokens=max_tokens)
        elif path.suffix.lower() == ".jsonl":
            yield from load_jsonl(path, domain)
        elif path.suffix.lower() in PAGE_SUFFIXES:
            if not domain:
                raise LoadError(f"{path}: a single page needs --domain NAME")
            yield from load_page(path, domain=check_domain(domain), source=f"{domain}/{path.name}", count_tokens=count_tokens, max_tokens=max_tokens)
        else:
            raise LoadError(f"{path}: unsupported file type (use .jsonl, .md, .html, .txt or a folder)")
