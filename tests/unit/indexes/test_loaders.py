from pathlib import Path

from indexes.loaders import LoadReport, folder_pages, load_paths
from indexes.segment import Segmentation


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _read(site: Path) -> tuple[list[str], LoadReport]:
    """The sources of the pages ``folder_pages`` lists under ``site`` (sorted), and its report."""
    report = LoadReport()
    return sorted(p.source for p in folder_pages(site, domain=None, report=report)), report


def test_a_sphinx_build_is_read_from_its_pages_not_its_sources_modules_or_indexes(tmp_path):
    """A Sphinx build as published (``make html``, Debian's ``*-doc`` packages) holds a copy of every page's source
    under ``_sources`` (read as text, each page would come twice, in raw markup) and viewcode's highlighted modules;
    a folder of another product named ``_sources`` without a build's marker is read as any folder."""
    page = "<html><body><h1>Quickstart</h1><p>Run sphinx-quickstart.</p></body></html>"
    _write(
        tmp_path / "site" / "sphinx",
        {
            "objects.inv": "# Sphinx inventory",
            "index.html": page.replace("Quickstart", "Welcome"),
            "usage/quickstart.html": page,
            "_sources/index.rst.txt": "Welcome\n=======\n",
            "_sources/usage/quickstart.rst.txt": "Quickstart\n==========\n\nRun sphinx-quickstart.\n",
            "_modules/sphinx/application.html": "<html><body><h1>Source code for sphinx.application</h1><pre>x = 1</pre></body></html>",
            "_static/notes.txt": "static text",
            "genindex.html": page,
            "genindex-A.html": page,
            "search.html": page,
            "py-modindex.html": page,
        },
    )
    _write(tmp_path / "site" / "notes", {"_sources/notes.txt": "Notes kept by hand.", "index.md": "# Notes\n\nText.\n"})
    sources, report = _read(tmp_path / "site")
    assert sources == ["notes/_sources/notes.txt", "notes/index.md", "sphinx/index.html", "sphinx/usage/quickstart.html"]
    skipped = {s.source: s.reason for s in report.of("sphinx").skipped}
    assert skipped["sphinx/_sources/usage/quickstart.rst.txt"].startswith("a Sphinx build's copy of a page's source")
    assert skipped["sphinx/_modules/sphinx/application.html"].startswith("a Sphinx build's highlighted module source")
    assert skipped["sphinx/_static/notes.txt"].startswith("a Sphinx build's static files")
    assert {s for s, r in skipped.items() if "generated index or search page" in r} == {
        "sphinx/genindex.html",
        "sphinx/genindex-A.html",
        "sphinx/search.html",
        "sphinx/py-modindex.html",
    }
    assert skipped["sphinx/objects.inv"] == "unsupported file type .inv"
    assert report.of("notes").skipped == []


def test_a_javadoc_build_is_read_from_its_class_and_package_pages_not_its_indexes(tmp_path):
    """A Javadoc build (``element-list`` or ``package-list`` beside ``help-doc.html``) writes a "Uses of Class" page per
    class (117 of libjsoup-java-doc's 266 pages; "No usage of org.jsoup.select.Selector" came first for "How do I select
    elements with a CSS selector in jsoup?"), indexes, trees and a help page on reading API documentation. Those are
    skipped with their reasons; a folder named ``class-use`` outside such a build is read as any folder."""
    page = "<html><body><h1>Class {0}</h1><p>{0} does its own work.</p></body></html>"
    _write(
        tmp_path / "site" / "jsoup",
        {
            "element-list": "org.jsoup\norg.jsoup.select\n",
            "help-doc.html": page.format("How This API Document Is Organized"),
            "index-all.html": page.format("Index"),
            "allclasses-index.html": page.format("All Classes"),
            "overview-tree.html": page.format("Hierarchy For All Packages"),
            "overview-summary.html": page.format("jsoup overview"),
            "index-files/index-1.html": page.format("A"),
            "org/jsoup/select/Selector.html": page.format("Selector"),
            "org/jsoup/select/package-summary.html": page.format("Package org.jsoup.select"),
            "org/jsoup/select/package-tree.html": page.format("Hierarchy For Package org.jsoup.select"),
            "org/jsoup/select/package-use.html": page.format("Uses of Package org.jsoup.select"),
            "org/jsoup/select/class-use/Selector.html": page.format("Uses of Class org.jsoup.select.Selector"),
        },
    )
    _write(tmp_path / "site" / "notes", {"class-use/teaching.html": page.format("Teaching"), "help-doc.html": page.format("Help")})
    sources, report = _read(tmp_path / "site")
    assert sources == [
        "jsoup/org/jsoup/select/Selector.html",
        "jsoup/org/jsoup/select/package-summary.html",
        "jsoup/overview-summary.html",
        "notes/class-use/teaching.html",
        "notes/help-doc.html",
    ]
    skipped = {s.source: s.reason for s in report.of("jsoup").skipped}
    assert skipped["jsoup/org/jsoup/select/class-use/Selector.html"].startswith('a Javadoc build\'s "Uses of Class" page')
    assert skipped["jsoup/index-files/index-1.html"] == "a Javadoc build's generated index, not a page"
    generated = {s for s, r in skipped.items() if r.startswith("a Javadoc build's generated index, tree, help")}
    assert generated == {
        "jsoup/help-doc.html",
        "jsoup/index-all.html",
        "jsoup/allclasses-index.html",
        "jsoup/overview-tree.html",
        "jsoup/org/jsoup/select/package-tree.html",
        "jsoup/org/jsoup/select/package-use.html",
    }
    assert report.of("notes").skipped == []


def test_a_sites_page_not_found_is_no_page(tmp_path):
    page = "<html><body><h1>Getting started</h1><p>Install with pip.</p></body></html>"
    _write(tmp_path / "site" / "mkdocs", {"index.html": page, "404.html": "<html><body><h1>404</h1><p>Page not found</p></body></html>"})
    report = LoadReport()
    assert [p.source for p in folder_pages(tmp_path / "site", domain=None, report=report)] == ["mkdocs/index.html"]
    assert [(s.source, s.reason) for s in report.of("mkdocs").skipped] == [("mkdocs/404.html", "a site's page-not-found page, not a page")]


def test_plain_text_sources_beside_their_html_pages_are_not_read_twice(tmp_path):
    """AsciiDoc builds git-commit.html from git-commit.txt and Debian's git-doc ships both (239 of its 292 .txt files
    have an HTML page of their name; the others are fragments the pages include). A folder of text notes with one
    HTML page among them is read as before."""
    page = "<html><body><h1>git-commit(1)</h1><p>Record changes to the repository.</p></body></html>"
    _write(
        tmp_path / "site" / "git",
        {
            "git-commit.html": page,
            "git-commit.txt": "git-commit(1)\n=============\n",
            "git-log.html": page.replace("git-commit", "git-log"),
            "git-log.txt": "x",
            "diff-options.txt": "-p::",
        },
    )
    _write(tmp_path / "site" / "notes", {"a.txt": "Note a.", "b.txt": "Note b.", "c.txt": "Note c.", "c.html": page})
    sources, report = _read(tmp_path / "site")
    assert sources == ["git/git-commit.html", "git/git-log.html", "notes/a.txt", "notes/b.txt", "notes/c.html", "notes/c.txt"]
    skipped = {s.source: s.reason for s in report.of("git").skipped}
    assert skipped == {
        "git/git-commit.txt": "the source of git-commit.html (read from that page)",
        "git/git-log.txt": "the source of git-log.html (read from that page)",
        "git/diff-options.txt": "a source the HTML pages beside it include (most .txt files here are their pages' sources)",
    }


def _page(lang: str, heading: str, text: str) -> str:
    return f'<!DOCTYPE html>\n<html lang="{lang}"><head><title>{heading}</title></head><body><h1>{heading}</h1><p>{text}</p></body></html>'


def test_a_manual_in_a_folder_per_language_is_read_once_in_its_main_language(tmp_path):
    """Debian's apache2-doc: a folder per language, each holding every page, the untranslated ones as links to the
    English folder's (read as one product, 2,685 pages where 238 are English). Links and byte-identical copies are
    read once, at the file they repeat; pages declaring another language than most of the product's are skipped,
    each with its reason."""
    root = tmp_path / "site" / "httpd"
    _write(
        root,
        {
            "en/bind.html": _page("en", "Binding", "Listen on port 80."),
            "en/caching.html": _page("en-US", "Caching", "Enable mod_cache."),
            "en/figures.html": _page("en", "Binding", "Listen on port 80."),  # a byte-identical copy of bind.html
            "de/bind.html": _page("de", "Bindung", "Auf Port 80 lauschen."),
            "fr/bind.html": _page("fr-FR", "Association", "Écouter sur le port 80."),
        },
    )
    (root / "de" / "caching.html").symlink_to(root / "en" / "caching.html")
    (root / "fr" / "caching.html").symlink_to(root / "en" / "caching.html")
    sources, report = _read(tmp_path / "site")
    assert sources == ["httpd/en/bind.html", "httpd/en/caching.html"]
    skipped = {s.source: s.reason for s in report.of("httpd").skipped}
    assert skipped["httpd/de/caching.html"] == skipped["httpd/fr/caching.html"] == "a link to httpd/en/caching.html (read there)"
    assert skipped["httpd/en/figures.html"] == "the same page as httpd/en/bind.html (read there)"
    assert skipped["httpd/de/bind.html"].startswith("in 'de' (its <html lang>), a translation: 2 of the product's 4 pages are in 'en'")
    assert skipped["httpd/fr/bind.html"].startswith("in 'fr' (its <html lang>)")
    assert len(skipped) == 5


def test_folders_of_translations_beside_an_english_one_are_skipped_when_the_pages_declare_no_language(tmp_path):
    """Publican builds the Debian Administrator's Handbook in a folder per locale (en-US/, de-DE/, pt-BR/, ... 26) and
    declares no language in its pages: read as one product, 3,302 pages and 34,652 passages in 26 languages. Pages of
    a folder named as a language beside an English one, holding that folder's page names, are skipped with the
    reason; a folder so named holding other pages, and language folders with no English sibling, are read."""
    page = "<html><body><h1>{0}</h1><p>{0} text of its own.</p></body></html>"
    _write(
        tmp_path / "site" / "handbook",
        {
            "en-US/apt.html": page.format("APT"),
            "en-US/sect.rights.html": page.format("Managing rights"),
            "de-DE/apt.html": page.format("APT (Deutsch)"),
            "de-DE/sect.rights.html": page.format("Berechtigungen verwalten"),
            "pt_BR/apt.html": page.format("APT (Português)"),
            "ts/handbook.html": page.format("A TypeScript page"),  # a language's name (Tsonga), other pages
        },
    )
    _write(tmp_path / "site" / "guide", {"de/index.html": page.format("Anleitung"), "fr/index.html": page.format("Guide")})
    sources, report = _read(tmp_path / "site")
    assert sources == [
        "guide/de/index.html",
        "guide/fr/index.html",
        "handbook/en-US/apt.html",
        "handbook/en-US/sect.rights.html",
        "handbook/ts/handbook.html",
    ]
    skipped = {s.source: s.reason for s in report.of("handbook").skipped}
    assert skipped == {
        f"handbook/{page}": f"a translation: in {page.split('/')[0]}/, beside handbook/en-US/ of the same pages (read there)"
        for page in ("de-DE/apt.html", "de-DE/sect.rights.html", "pt_BR/apt.html")
    }


def test_a_product_written_in_two_languages_alike_or_declaring_none_is_read_whole(tmp_path):
    _write(
        tmp_path / "site" / "both",
        {"guide-en.html": _page("en", "Guide", "Install it."), "guide-fr.html": _page("fr", "Guide", "Installez-le.")},
    )
    _write(tmp_path / "site" / "plain", {"a.html": "<html><body><h1>A</h1><p>One.</p></body></html>", "b.md": "# B\n\nTwo.\n"})
    sources, report = _read(tmp_path / "site")
    assert sources == ["both/guide-en.html", "both/guide-fr.html", "plain/a.html", "plain/b.md"]
    assert report.of("both").skipped == [] and report.of("plain").skipped == []


def _words(text: str) -> int:
    return len(text.split())


def test_text_most_of_a_products_pages_hold_is_read_once(tmp_path):
    """SQLite's tagline heads 760 of its 766 pages, PuTTY's feedback note ends all 20 of its manual's: each came back as
    a passage of its own or at the head of one on every page. Text more than half of a product's pages hold (at least
    3, of at least 4 words) is read on the first page holding it only; a page left with nothing else is skipped with
    the reason. Short labels repeated on most pages ("Description:") and headings stay; a product where the text is
    on half the pages or fewer keeps it everywhere."""
    tagline = "Small. Fast. Reliable. Choose any three."

    def page(heading: str, body: str, *, tag: bool = True) -> str:
        head = f"<p>{tagline}</p>" if tag else ""
        return f"<html><body>{head}<h1>{heading}</h1><p>Description:</p><p>{body}</p></body></html>"

    _write(
        tmp_path / "site" / "sqlite",
        {
            "a-vacuum.html": page("VACUUM", "The VACUUM command rebuilds the database file."),
            "b-pragma.html": page("PRAGMA", "The PRAGMA statement modifies the library's operation."),
            "c-wal.html": page("WAL", "Write-ahead logging makes readers and the writer concurrent."),
            "d-untagged.html": page("Limits", "SQLite has limits on the length of strings.", tag=False),
            "e-syntax.html": f"<html><body><p>{tagline}</p></body></html>",  # nothing but the tagline
        },
    )
    _write(
        tmp_path / "site" / "few",
        {
            "a.html": f"<html><body><p>{tagline}</p><h1>One</h1><p>First page text here.</p></body></html>",
            "b.html": "<html><body><h1>Two</h1><p>Second page text here.</p></body></html>",
            "c.html": "<html><body><h1>Three</h1><p>Third page text here.</p></body></html>",
            "d.html": f"<html><body><p>{tagline}</p><h1>Four</h1><p>Fourth page text here.</p></body></html>",
        },
    )
    report = LoadReport()
    got = list(load_paths([tmp_path / "site"], domain=None, segmentation=Segmentation(_words, 256, min_chars=0), report=report))
    sqlite = [p for p in got if p.domain == "sqlite"]
    holding = [p.doc_id for p in sqlite if tagline in " ".join(p.text.split())]
    assert holding == ["sqlite/a-vacuum#000"]  # read once, on the first page holding it
    assert {p.source for p in sqlite} == {"sqlite/a-vacuum.html", "sqlite/b-pragma.html", "sqlite/c-wal.html", "sqlite/d-untagged.html"}
    assert all("Description:" in p.text for p in sqlite if tagline not in p.text)  # a short label most pages repeat: kept
    assert any(p.title.startswith("WAL") and "concurrent" in p.text for p in sqlite)
    assert [(s.source, s.reason) for s in report.of("sqlite").skipped] == [
        ("sqlite/e-syntax.html", "only text most of the product's pages hold (read on the first of them)")
    ]
    assert report.of("sqlite").dropped_chars > 0
    few = [p for p in got if p.domain == "few" and tagline in " ".join(p.text.split())]
    assert sorted(p.source for p in few) == ["few/a.html", "few/d.html"]  # on 2 of 4 pages: not most of them
