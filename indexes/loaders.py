"""Read documents: the JSONL exchange format, and folders of Markdown, HTML and text pages."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexes.document import PageDoc
from indexes.markup import PAGE_SUFFIXES, UnreadablePage, read_page
from indexes.segment import Segmentation, passages
from indexes.variants import repeated_pages, site_furniture, without_furniture
from service.config import Settings
from service.jsonl import read_objects
from service.retrieval.passage import Passage

_READABLE = ", ".join(sorted(PAGE_SUFFIXES))
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


@dataclass(frozen=True)
class Page:
    """One page file to load: its domain and its source, ``<domain>/<path>``."""

    path: Path
    domain: str
    source: str


@dataclass(frozen=True)
class Skipped:
    """A file that gave no passage, and why."""

    source: str
    reason: str


@dataclass
class DomainLoad:
    """What loading one product's pages found (``fedqa ingest`` prints it)."""

    pages_read: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    passage_words: list[int] = field(default_factory=list)
    kept_chars: int = 0
    dropped_chars: int = 0

    def summary(self) -> dict[str, Any]:
        """The product's line of the ingest report."""
        words = sorted(self.passage_words)
        total = self.kept_chars + self.dropped_chars
        return {
            "pages_read": self.pages_read,
            "pages_skipped": len(self.skipped),
            "skipped": [{"page": s.source, "reason": s.reason} for s in self.skipped],
            "passages": len(words),
            "median_words": words[len(words) // 2] if words else 0,
            "mean_words": round(sum(words) / len(words), 1) if words else 0.0,
            "boilerplate_dropped": round(self.dropped_chars / total, 3) if total else 0.0,
        }


@dataclass
class LoadReport:
    """Per product, what loading its pages found (JSONL inputs count passages only)."""

    domains: dict[str, DomainLoad] = field(default_factory=dict)

    def of(self, domain: str) -> DomainLoad:
        """The product's record (made on first use)."""
        return self.domains.setdefault(domain, DomainLoad())


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


def read_doc(page: Page, report: LoadReport) -> PageDoc | None:
    """The page read into its main content; None (recorded in ``report`` with the reason) when it yields no text or
    cannot be read."""
    record = report.of(page.domain)
    try:
        return read_page(page.path, PAGE_SUFFIXES[page.path.suffix.lower()])
    except UnreadablePage as exc:
        record.skipped.append(Skipped(page.source, str(exc)))
        record.dropped_chars += exc.dropped_chars
    except OSError as exc:
        record.skipped.append(Skipped(page.source, f"could not be read: {exc.strerror or exc}"))
    return None


def page_passages(page: Page, doc: PageDoc, *, id_stem: str, segmentation: Segmentation, report: LoadReport) -> Iterator[Passage]:
    """Passages of one read page (doc_id ``<id_stem>#NNN``): its main content cut at headings into passages
    (:mod:`indexes.segment`), counted in ``report``."""
    record = report.of(page.domain)
    record.pages_read += 1
    record.kept_chars += doc.kept_chars
    record.dropped_chars += doc.dropped_chars
    for n, part in enumerate(passages(doc, page.path.stem, segmentation)):
        record.passage_words.append(len(part.text.split()))
        yield Passage(doc_id=f"{id_stem}#{n:03d}", domain=page.domain, title=part.title, source=page.source, text=part.text)


def product_passages(pages: list[Page], *, stems: dict[Page, str], segmentation: Segmentation, report: LoadReport) -> Iterator[Passage]:
    """Passages of one product's pages: every page read first, so that text most of them hold (a site's tagline or
    footer: :func:`indexes.variants.site_furniture`) is read once, on the first page holding it; a page left with
    nothing else is skipped with that reason."""
    docs = [(page, doc) for page in pages if (doc := read_doc(page, report)) is not None]
    furniture = site_furniture([doc for _, doc in docs])
    shown: set[str] = set()
    for page, doc in docs:
        kept = without_furniture(doc, furniture, shown)
        if not kept.blocks:
            record = report.of(page.domain)
            record.skipped.append(Skipped(page.source, "only text most of the product's pages hold (read on the first of them)"))
            record.dropped_chars += kept.dropped_chars
            continue
        yield from page_passages(page, kept, id_stem=stems[page], segmentation=segmentation, report=report)


def _product_files(root: Path) -> list[Path]:
    return [f for f in sorted(root.rglob("*")) if f.is_file() and not any(x.startswith(".") for x in f.relative_to(root).parts)]


#: Files that mark a folder as a Sphinx build (its HTML output as published: ``make html``, Read the Docs, Debian's
#: ``*-doc`` packages).
SPHINX_MARKERS = frozenset({"objects.inv", "searchindex.js"})
#: A Sphinx build's folders that hold none of its pages, and why each is not read: ``_sources`` copies every page's
#: reStructuredText or Markdown source (read as text, each page would come twice, the second time in raw markup);
#: ``_modules`` holds the highlighted Python source of sphinx.ext.viewcode.
SPHINX_FOLDERS = {
    "_sources": "a Sphinx build's copy of a page's source (the page is read from its HTML)",
    "_modules": "a Sphinx build's highlighted module source (sphinx.ext.viewcode), not a page",
    "_static": "a Sphinx build's static files, not a page",
    "_images": "a Sphinx build's images, not a page",
    "_downloads": "a Sphinx build's downloadable files, not a page",
}
#: A Sphinx build's generated pages at its root: the general index (``genindex``, ``genindex-A``, ...), the search
#: page and the module indexes (``py-modindex``).
_SPHINX_GENERATED = re.compile(r"^(?:genindex(?:-\w+)?|search|\w+-modindex)\.html?$", re.IGNORECASE)


#: Files that mark a folder as a Javadoc build: its package list (``element-list`` since JDK 11, ``package-list``
#: before) beside its help page.
JAVADOC_LISTS = frozenset({"element-list", "package-list"})
JAVADOC_HELP = "help-doc.html"
#: A Javadoc build's generated pages, in any of its folders, that document nothing of their own: its indexes (``index-all``,
#: ``allclasses-index``, ...), class trees, "Uses of" pages of a package, deprecated list, help page and frames.
_JAVADOC_GENERATED = re.compile(
    r"^(?:index-all|allclasses(?:-index|-frame|-noframe)?|allpackages-index|overview-tree|package-tree|overview-frame"
    r"|package-frame|package-use|deprecated-list|help-doc|search)\.html?$",
    re.IGNORECASE,
)
#: A Javadoc build's folders of generated pages: each class's "Uses of Class" page, and the index split by letter.
JAVADOC_FOLDERS = {
    "class-use": 'a Javadoc build\'s "Uses of Class" page (links to where a class is used), not a page',
    "index-files": "a Javadoc build's generated index, not a page",
}


#: The page a site generator writes for a missing URL (MkDocs, Hugo, Jekyll, Docusaurus): "Page not found".
NOT_FOUND_PAGES = frozenset({"404.html", "404.htm"})


def _inside(f: Path, builds: set[Path]) -> Iterator[tuple[str, ...]]:
    """The parts of ``f``'s path inside each of ``builds`` that holds it."""
    return (f.relative_to(build).parts for build in builds if f.is_relative_to(build))


def not_pages(files: list[Path]) -> dict[Path, str]:
    """The ``files`` a documentation site holds that are none of its pages, each with the reason: a build's
    page-not-found page (:data:`NOT_FOUND_PAGES`); in a Sphinx build (a folder holding :data:`SPHINX_MARKERS`) its
    internal folders (:data:`SPHINX_FOLDERS`), its generated indexes and its search page; in a Javadoc build (a folder
    holding :data:`JAVADOC_LISTS` and :data:`JAVADOC_HELP`) its "Uses of" pages, indexes, trees and help page; and the
    plain-text sources of HTML pages shipped beside them (:func:`text_sources`)."""
    builds = {f.parent for f in files if f.name in SPHINX_MARKERS}
    skips: dict[Path, str] = {f: "a site's page-not-found page, not a page" for f in files if f.name.lower() in NOT_FOUND_PAGES}
    names = {f.parent / f.name for f in files}
    javadocs = {f.parent for f in files if f.name in JAVADOC_LISTS and f.parent / JAVADOC_HELP in names}
    for f in files:
        for parts in _inside(f, javadocs):
            folder = next((p for p in parts[:-1] if p in JAVADOC_FOLDERS), None)
            if folder is not None:
                skips[f] = JAVADOC_FOLDERS[folder]
            elif _JAVADOC_GENERATED.match(parts[-1]):
                skips[f] = 'a Javadoc build\'s generated index, tree, help or "Uses of" page, not a page'
        for parts in _inside(f, builds):
            if parts[0] in SPHINX_FOLDERS and len(parts) > 1:
                skips[f] = SPHINX_FOLDERS[parts[0]]
            elif len(parts) == 1 and _SPHINX_GENERATED.match(parts[0]):
                skips[f] = "a Sphinx build's generated index or search page, not a page"
    skips.update(text_sources(files))
    return skips


def text_sources(files: list[Path]) -> dict[Path, str]:
    """Plain-text files that are the sources of HTML pages beside them, each with the reason: in a folder where at
    least half of the ``.txt`` files have an HTML page of their name (AsciiDoc builds ``git-commit.html`` from
    ``git-commit.txt`` and ships both, as Debian's ``git-doc`` does), every ``.txt`` file is a source (the others
    are fragments the pages include); read, each page would come twice, the second time in raw markup."""
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    skips: dict[Path, str] = {}
    for held in by_folder.values():
        html = {f.stem: f.name for f in held if f.suffix.lower() in (".html", ".htm")}
        texts = [f for f in held if f.suffix.lower() == ".txt"]
        twins = [f for f in texts if f.stem in html]
        if not twins or 2 * len(twins) < len(texts):
            continue
        for f in texts:
            skips[f] = (
                f"the source of {html[f.stem]} (read from that page)"
                if f.stem in html
                else "a source the HTML pages beside it include (most .txt files here are their pages' sources)"
            )
    return skips


def _source(domain: str, root: Path, f: Path) -> str:
    """A page's source: its product and its path in the product's folder."""
    return f"{domain}/{f.relative_to(root).as_posix()}"


def folder_pages(path: Path, *, domain: str | None, report: LoadReport | None = None) -> list[Page]:
    """Pages under ``path``: one sub-folder per domain, or the whole folder as ``domain`` when given. Files of other
    types, and copies and translations of a product's pages (:mod:`indexes.variants`), are recorded in ``report`` as
    skipped; a product folder with no page of a readable type is refused, naming
    the folder and what it holds."""
    if domain:
        roots = [(check_domain(domain), path)]
    else:
        roots = [(check_domain(d.name), d) for d in sorted(path.iterdir()) if d.is_dir() and not d.name.startswith(".")]
        if not roots:
            raise LoadError(f"{path}: expected one sub-folder per domain (or pass --domain NAME)")
    report = report if report is not None else LoadReport()
    pages: list[Page] = []
    for dom, root in roots:
        files = _product_files(root)
        skips = not_pages(files)
        files = [f for f in files if f not in skips]
        readable = [f for f in files if f.suffix.lower() in PAGE_SUFFIXES]
        if not readable:
            kinds = Counter(f.suffix.lower() or "(no extension)" for f in files)
            held = ", ".join(f"{n} {k}" for k, n in kinds.most_common(5)) or "no files"
            raise LoadError(f"{root}: product {dom!r} has no page fedqa reads ({held}); readable: {_READABLE}")
        skips.update({f: f"unsupported file type {f.suffix or '(none)'}" for f in files if f.suffix.lower() not in PAGE_SUFFIXES})
        repeated = repeated_pages(readable, root, dom)
        skips.update(repeated)
        report.of(dom).skipped.extend(Skipped(_source(dom, root, f), reason) for f, reason in skips.items())
        pages.extend(Page(f, dom, _source(dom, root, f)) for f in readable if f not in repeated)
    return pages


@dataclass(frozen=True)
class Input:
    """One path given to ``fedqa ingest``: a JSONL file (``pages`` None) or the pages it names."""

    path: Path
    pages: list[Page] | None


def _pages_of(path: Path, domain: str | None, report: LoadReport) -> list[Page] | None:
    """The pages ``path`` names (a folder or one page), or None for a ``.jsonl`` file; LoadError for anything else."""
    if not path.exists():
        raise LoadError(f"{path}: no such file or folder")
    if path.is_dir():
        return folder_pages(path, domain=domain, report=report)
    if path.suffix.lower() == ".jsonl":
        return None
    if path.suffix.lower() in PAGE_SUFFIXES:
        if not domain:
            raise LoadError(f"{path}: a single page needs --domain NAME")
        return [Page(path, check_domain(domain), f"{domain}/{path.name}")]
    raise LoadError(f"{path}: unsupported file type {path.suffix or '(none)'} (use .jsonl, a folder, or a page: {_READABLE})")


def check_inputs(paths: list[Path], *, domain: str | None, report: LoadReport | None = None) -> list[Input]:
    """Every path checked and its pages listed (cheap: no page is parsed, no model loaded); LoadError names the first
    path that cannot be ingested and why."""
    report = report if report is not None else LoadReport()
    inputs = [Input(path, _pages_of(path, domain, report)) for path in paths]
    id_stems([p for i in inputs for p in i.pages or []])  # two files with one source: refused here
    return inputs


def segmentation_for(settings: Settings, count_tokens: Callable[[str], int]) -> Segmentation:
    """How ``fedqa ingest`` cuts pages under ``settings`` (FEDQA_MAX_PASSAGE_TOKENS, FEDQA_MIN_PASSAGE_CHARS)."""
    return Segmentation(count_tokens, settings.max_passage_tokens, settings.min_passage_chars)


def load_paths(paths: list[Path], *, domain: str | None, segmentation: Segmentation, report: LoadReport | None = None) -> Iterator[Passage]:
    """Passages from every path: ``.jsonl`` files, page files (need ``domain``) or folders.

    Every path is checked, and the pages' doc_ids chosen (:func:`id_stems`), before the first passage is read.
    ``report`` records per product the pages read and skipped (with reasons), passage lengths and boilerplate dropped;
    a product whose pages all yield nothing is refused (LoadError with the reasons).
    """
    report = report if report is not None else LoadReport()
    inputs = check_inputs(paths, domain=domain, report=report)
    stems = id_stems([p for i in inputs for p in i.pages or []])
    for item in inputs:
        if item.pages is None:
            for passage in load_jsonl(item.path, domain):
                report.of(passage.domain).passage_words.append(len(passage.text.split()))
                yield passage
            continue
        for dom in dict.fromkeys(p.domain for p in item.pages):
            n = 0
            for passage in product_passages([p for p in item.pages if p.domain == dom], stems=stems, segmentation=segmentation, report=report):
                n += 1
                yield passage
            if n == 0:
                reasons = Counter(s.reason for s in report.of(dom).skipped)
                said = "; ".join(f"{k} ({v} pages)" for k, v in reasons.most_common(3))
                raise LoadError(f"{item.path}: product {dom!r} yields no passage: {said}")
