from pathlib import Path

from indexes.loaders import LoadReport, folder_pages


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_sphinx_build_is_read_from_its_pages_not_its_sources_modules_or_indexes(tmp_path):
    """A Sphinx build as published (``make html``, Debian's ``*-doc`` packages) holds a copy of every page's source
    under ``_sources`` (read as text, each page would come twice, in raw markup) and viewcode's highlighted modules;
    a folder of another product named ``_sources`` without a build's marker is read as any folder."""
    page = "<html><body><h1>Quickstart</h1><p>Run sphinx-quickstart.</p></body></html>"
    _write(
        tmp_path / "site" / "sphinx",
        {
            "objects.inv": "# Sphinx inventory",
            "index.html": page,
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
    report = LoadReport()
    pages = folder_pages(tmp_path / "site", domain=None, report=report)
    assert sorted(p.source for p in pages) == ["notes/_sources/notes.txt", "notes/index.md", "sphinx/index.html", "sphinx/usage/quickstart.html"]
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
            "git-log.html": page,
            "git-log.txt": "x",
            "diff-options.txt": "-p::",
        },
    )
    _write(tmp_path / "site" / "notes", {"a.txt": "Note a.", "b.txt": "Note b.", "c.txt": "Note c.", "c.html": page})
    report = LoadReport()
    pages = folder_pages(tmp_path / "site", domain=None, report=report)
    assert sorted(p.source for p in pages) == ["git/git-commit.html", "git/git-log.html", "notes/a.txt", "notes/b.txt", "notes/c.html", "notes/c.txt"]
    skipped = {s.source: s.reason for s in report.of("git").skipped}
    assert skipped == {
        "git/git-commit.txt": "the source of git-commit.html (read from that page)",
        "git/git-log.txt": "the source of git-log.html (read from that page)",
        "git/diff-options.txt": "a source the HTML pages beside it include (most .txt files here are their pages' sources)",
    }
