"""Reading pages as published (main content, headings, code, prose) and cutting them into passages."""

import io
from pathlib import Path

import pytest

from indexes.document import BlockKind
from indexes.html import clean_title, read_html
from indexes.markup import PageKind, UnreadablePage, read_page
from indexes.segment import Segmentation, passages, sections, split_section
from service.retrieval.encoder import packaged_minilm_path, token_counter


@pytest.fixture(scope="module")
def count():
    """The encoder's token count from its tokenizer alone (tests/unit/service/retrieval/test_tokens.py: the counts
    transformers gives), so these tests load no model."""
    return token_counter(packaged_minilm_path())


def _page(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_markdown_sections_carry_title_path_and_ignore_fenced_headers(tmp_path):
    md = (
        "# Billing guide\n\nIntro text.\n\n## Invoices\n\nInvoice text.\n\n### Credit notes\n\nCredit text.\n\n"
        "```bash\n# not a header\necho hi\n```\n\n## Taxes\n\nTax text.\n"
    )
    doc = read_page(_page(tmp_path, "billing.md", md), PageKind.MARKDOWN)
    parts = sections(doc, "fallback")
    assert [s.title for s in parts] == [
        "Billing guide",
        "Billing guide > Invoices",
        "Billing guide > Invoices > Credit notes",
        "Billing guide > Taxes",
    ]
    assert "# not a header\necho hi" in parts[2].text
    assert parts[3].text == "Taxes\n\nTax text."


def test_markdown_front_matter_is_the_title_not_text(tmp_path):
    """Jekyll, Hugo, MkDocs and Docusaurus pages open with front matter; read as Markdown, its YAML became a heading
    ("title: Installing Widget layout: docs") and the page's title, and Hugo's TOML a paragraph."""
    yaml_page = "---\ntitle: Installing Widget\nlayout: docs\n---\n\n# Installing\n\nRun pip install widget.\n"
    doc = read_page(_page(tmp_path, "install.md", yaml_page), PageKind.MARKDOWN)
    assert doc.title == "Installing Widget"
    assert [(b.kind, b.text) for b in doc.blocks] == [(BlockKind.HEADING, "Installing"), (BlockKind.PROSE, "Run pip install widget.")]
    toml_page = '+++\ntitle = "Config & keys"\nweight = 10\n+++\n\nEdit widget.toml.\n'
    doc = read_page(_page(tmp_path, "config.md", toml_page), PageKind.MARKDOWN)
    assert doc.title == "Config & keys" and [b.text for b in doc.blocks] == ["Edit widget.toml."]
    ruled = "---\n\nA page that opens with a rule: : not front matter.\n"  # YAML that does not parse: read as written
    assert [b.text for b in read_page(_page(tmp_path, "ruled.md", ruled), PageKind.MARKDOWN).blocks] == [
        "A page that opens with a rule: : not front matter."
    ]


def test_html_furniture_is_dropped_and_headings_come_from_heading_elements_only():
    html = (
        "<html><head><title>Macros &#8212; Relay 2.1 documentation</title><script>var x=1;</script></head><body>"
        "<div class='related' role='navigation'><a href='a.html'>previous</a> | <a href='b.html'>next</a></div>"
        "<div class='sphinxsidebar'><h3>Table of Contents</h3><h4>Previous topic</h4><p><a href='a.html'>Setup</a></p>"
        "<h3>This Page</h3><ul><li><a href='src.txt'>Show Source</a></li></ul></div>"
        "<div class='body'><h1>Macros<a class='headerlink' href='#m'>\u00b6</a></h1>"
        "<p>A macro records keys\n  and replays them\n  later.</p>"
        "<ul><li><a href='#rec'>Recording</a></li><li><a href='#play'>Replaying</a></li></ul>"
        "<pre># record a macro\nctrl-x (\n\n# replay it\nctrl-x e</pre>"
        "<h2>Replaying<a class='headerlink' href='#play'>\u00b6</a></h2><p>Press <kbd>ctrl-x e</kbd> to replay.</p>"
        "</div><div class='footer'>&copy; 2024, the authors.</div></body></html>"
    )
    doc = read_html(html)
    assert doc.title == "Macros"
    kinds = [(b.kind, b.text) for b in doc.blocks]
    assert kinds == [
        (BlockKind.HEADING, "Macros"),
        (BlockKind.PROSE, "A macro records keys and replays them later."),
        (BlockKind.CODE, "# record a macro\nctrl-x (\n\n# replay it\nctrl-x e"),
        (BlockKind.HEADING, "Replaying"),
        (BlockKind.PROSE, "Press ctrl-x e to replay."),
    ]
    assert doc.dropped_chars > len("Table of Contents Previous topic Setup This Page Show Source")
    headings = [b.text for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert "record a macro" not in " ".join(headings)  # a comment in code is never a heading


def test_an_xhtml_page_with_an_xml_declaration_is_read(tmp_path):
    """DocBook's XSL stylesheets write XHTML that opens with an XML declaration, which lxml refuses in a str: every
    such page read as "no text" until the declaration was left out."""
    xhtml = (
        '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Holding packages</title></head><body>'
        '<div class="navheader"><a href="prev.html">Prev</a> <a href="next.html">Next</a></div>'
        "<h2>Holding packages</h2><p>Press = to hold the package at its current version.</p></body></html>"
    )
    doc = read_page(_page(tmp_path, "hold.html", xhtml.encode("utf-8")), PageKind.HTML)
    assert doc.title == "Holding packages"
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.HEADING, "Holding packages"),
        (BlockKind.PROSE, "Press = to hold the package at its current version."),
    ]


def test_a_redirect_page_is_skipped_with_where_it_points(tmp_path):
    """Texinfo writes a page per node kept in another node's file; each held only "The node you are looking for is at
    X." (89 of GNU diffutils' 112 pages, each a passage of its own)."""
    html = (
        "<html><head><title>Pagination (Comparing and Merging Files)</title>"
        '<meta http-equiv="Refresh" content="0; url=Adjusting-Output.html#Pagination"></head>'
        '<body><p>The node you are looking for is at <a href="Adjusting-Output.html#Pagination">Pagination</a>.</p></body></html>'
    )
    node = (
        "<html><head><title>Adjusting Output (Comparing and Merging Files)</title><meta name='Generator' content='makeinfo'>"
        "</head><body><h2>5 Making diff Output Prettier</h2><p>Use -t to expand tabs.</p></body></html>"
    )
    assert read_html(node).title == "Adjusting Output"  # Texinfo's "Node (Manual Title)": the node's name
    assert read_html(node.replace("makeinfo", "Sphinx 5.3")).title == "Adjusting Output (Comparing and Merging Files)"
    with pytest.raises(UnreadablePage, match="^a redirect to Adjusting-Output.html#Pagination$"):
        read_page(_page(tmp_path, "Pagination.html", html), PageKind.HTML)
    page = "<html><head><meta http-equiv='Content-Type' content='text/html'></head><body><p>Output can be paginated.</p></body></html>"
    assert [b.text for b in read_page(_page(tmp_path, "Adjusting.html", page), PageKind.HTML).blocks] == ["Output can be paginated."]


def test_a_themes_dialogs_and_hidden_elements_are_furniture():
    """MkDocs' own theme puts a search dialog and a keyboard-shortcut dialog in every page: each page's last passage
    was "Search From here you can search these documents... Keyboard Shortcuts Keys Action ? Open this help"."""
    html = (
        "<html><body><div role='main'><h1>Writing your docs</h1><p>Pages live in the docs directory.</p></div>"
        "<div class='modal' id='mkdocs_search_modal' role='dialog' aria-hidden='true'><h4>Search</h4>"
        "<p>From here you can search these documents. Enter your search terms below.</p></div>"
        "<div class='modal' id='mkdocs_keyboard_modal' role='dialog'><h4>Keyboard Shortcuts</h4>"
        "<table><tr><td>?</td><td>Open this help</td></tr><tr><td>n</td><td>Next page</td></tr></table></div>"
        "<dialog><p>Sign up for our newsletter.</p></dialog><p><span aria-hidden='true'>icon-text</span>Build with mkdocs build.</p>"
        "</body></html>"
    )
    doc = read_html(html)
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.HEADING, "Writing your docs"),
        (BlockKind.PROSE, "Pages live in the docs directory."),
        (BlockKind.PROSE, "Build with mkdocs build."),
    ]


def test_doxygens_title_area_and_navigation_path_are_furniture():
    """Doxygen puts the project's name and number atop every page: 76 of libyaml-doc's 163 passages held "yaml 0.2.5"."""
    html = (
        "<html><body><div id='top'><div id='titlearea'><table><tr><td><div id='projectname'>yaml <span id='projectnumber'>0.2.5"
        "</span></div></td></tr></table></div><div id='main-nav'></div></div><div id='nav-path' class='navpath'><ul><li>yaml.h</li></ul></div>"
        "<div class='contents'><h2>Detailed Description</h2><p>Create a SCALAR node and attach it to the document.</p></div></body></html>"
    )
    assert [b.text for b in read_html(html).blocks] == ["Detailed Description", "Create a SCALAR node and attach it to the document."]


def test_javadocs_lists_of_inherited_members_are_furniture():
    """A Javadoc class page names every member it inherits ("Methods inherited from class java.lang.Object: clone,
    equals, ..."), the same names on every page of a class inheriting them: 44 of libjsoup-java-doc's passages were one
    such list. Javadoc 8-16 marks it by the anchor opening its list item, 17 and later by a class."""
    html = (
        "<html><body><section><ul class='blockList'><li class='blockList'><a id='method.summary'><!-- --></a><h3>Method Summary</h3>"
        "<p>boolean matches(Element root, Element element): Test if the element meets the evaluator's requirements.</p></li>"
        "<li class='blockList'><a id='methods.inherited.from.class.java.lang.Object'><!-- --></a>"
        "<h3>Methods inherited from class&nbsp;java.lang.Object</h3><code>clone, equals, finalize, getClass, hashCode</code></li>"
        "</ul><div class='inherited-list'><h3 id='methods-inherited-from-class-org.jsoup.select.Evaluator'>Methods inherited from "
        "class Evaluator</h3><code>reset, cost</code></div></section></body></html>"
    )
    text = " ".join(b.text for b in read_html(html).blocks)
    assert "Method Summary" in text and "meets the evaluator's requirements" in text
    assert "inherited" not in text and "hashCode" not in text and "reset, cost" not in text


def test_an_admonitions_title_labels_its_box_not_a_section():
    """DocBook opens each admonition with a heading (``<div class="tip"><h3 class="title">Tip</h3>``): read as a section,
    it titled 1,057 of PostgreSQL's 8,400 passages "... > Tip", "> Note", "> Warning", the text after the box among
    them (a table of format patterns under "9.8. Data Type Formatting Functions > Tip"). It is the box's label now;
    the section goes on after the box; a heading later in such a box is still one."""
    html = (
        "<html><body><div class='sect1'><h2 class='title'>9.8. Data Type Formatting Functions</h2>"
        "<p>The formatting functions convert data types to formatted strings.</p>"
        "<div class='tip'><h3 class='title'>Tip</h3><p>to_timestamp also accepts ISO dates.</p></div>"
        "<p>Template patterns for date/time formatting: HH24 is the hour of the day.</p>"
        "<div class='note'><p>A note without a title.</p><h3>Time zones</h3><p>Zones are read by name.</p></div></div></body></html>"
    )
    parts = sections(read_html(html), "functions-formatting")
    assert [p.title for p in parts] == ["9.8. Data Type Formatting Functions", "9.8. Data Type Formatting Functions > Time zones"]
    assert "Tip\n\nto_timestamp also accepts ISO dates." in parts[0].text and "HH24 is the hour of the day" in parts[0].text


def test_texinfo_copiable_anchors_leave_no_pilcrow():
    html = (
        "<html><body><h2 class='section'>8.3 Readline Init File</h2><dl><dt id='index-bell_002dstyle'><span><code>bell-style</code>"
        "<a href='#index-bell_002dstyle' class='copiable-anchor'> &para;</a></span></dt>"
        "<dd><p>Controls what happens when Readline wants to ring the terminal bell.</p></dd></dl></body></html>"
    )
    text = " ".join(b.text for b in read_html(html).blocks)
    assert "bell-style" in text and "ring the terminal bell" in text
    assert "\u00b6" not in text


def test_a_page_of_navigation_only_is_unreadable_with_the_reason(tmp_path):
    html = "<html><body><div class='navigation'><a href='n1.html'>Next</a></div><ul>" + "".join(
        f"<li><a href='node{i}.html'>Topic {i}</a></li>" for i in range(20)
    )
    with pytest.raises(UnreadablePage, match="only navigation or link lists") as exc:
        read_page(_page(tmp_path, "index.html", html + "</ul></body></html>"), PageKind.HTML)
    assert exc.value.dropped_chars > 100


def test_man_page_pre_has_its_section_names_as_headings_and_reflowed_prose():
    html = (
        "<html><head><title> Postfix manual - postconf(1) </title></head><body><pre>\n"
        "<b>NAME</b>\n       postconf - Postfix configuration utility\n\n"
        "<b>DESCRIPTION</b>\n       By default, the <b>postconf</b>(1) command displays the values of <b>main.cf</b> con-\n"
        "       figuration parameters, and warns about possible mis-typed\n       parameter names.\n\n"
        "       <b>-a</b>     List the available SASL plug-in types for the Postfix SMTP\n"
        "              server.\n</pre></body></html>"
    )
    doc = read_html(html)
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.HEADING, "Name"),
        (BlockKind.PROSE, "postconf - Postfix configuration utility"),
        (BlockKind.HEADING, "Description"),
        (
            BlockKind.PROSE,
            "By default, the postconf(1) command displays the values of main.cf configuration parameters, and warns about "
            "possible mis-typed parameter names.",
        ),
        (BlockKind.PROSE, "-a List the available SASL plug-in types for the Postfix SMTP server."),
    ]


def test_haproxy_dconv_keywords_are_sections_and_dropdown_menus_leave_the_text():
    html = (
        "<html><body><h3 id='chapter-3.1'>3.1. Process management</h3>"
        "<div class='keyword'><b><a href='#3.1-ca-base'>ca-base</a></b> <span>&lt;dir&gt;</span></div>"
        "<pre class='text'>Assigns a default directory used with \"<span class='dropdown'><a class='dropdown-toggle' href='#'>"
        "ca-file</a><ul class='dropdown-menu'><li class='dropdown-header'>This keyword is available in sections :</li>"
        "<li><a href='#x'>Bind options</a></li></ul></span>\" directives.\n\n  Example :\n        global\n"
        "            ca-base /etc/ssl\n</pre></body></html>"
    )
    parts = sections(read_html(html), "configuration")
    assert [p.title for p in parts] == ["3.1. Process management > ca-base <dir>"]  # no <title>: the first heading
    assert parts[0].text.startswith('ca-base <dir>\n\nAssigns a default directory used with "ca-file" directives.')
    assert "available in sections" not in parts[0].text
    assert parts[0].text.endswith("  Example :\n        global\n            ca-base /etc/ssl")


def test_a_pre_paragraph_of_link_lines_is_navigation_and_a_linked_example_is_kept():
    keywords = "".join(f"   - <a href='#kw{i}'>keyword-{i}</a>\n" for i in range(8))
    html = (
        "<html><body><h1>3. Global parameters</h1><pre class='text'>The following keywords are supported in the "
        f"global section :\n\n * Process management\n{keywords}   - unlinked-one\n\n"
        "Each keyword is described below.\n</pre><h2>maxconn</h2><pre>global\n    <a href='#maxconn'>maxconn</a> 2000\n"
        "    <a href='#nbthread'>nbthread</a> 4\n    <a href='#daemon'>daemon</a>\n</pre></body></html>"
    )
    doc = read_html(html)
    text = "\n".join(b.text for b in doc.blocks)
    assert "keyword-3" not in text and "Process management" not in text
    assert "The following keywords are supported in the global section :" in text
    assert "Each keyword is described below." in text
    assert "global\n    maxconn 2000\n    nbthread 4\n    daemon" in text  # code that links its keywords stays
    assert doc.dropped_chars >= len("keyword-0") * 8


def test_a_short_passage_left_over_by_packing_joins_the_passage_before_it(count):
    body = "The option enables logging of null connections in busy environments. " * 14
    html = f"<html><body><h1>option dontlognull</h1><p>{body}</p><p>See also: log, monitor-uri.</p></body></html>"
    doc = read_html(html)
    assert count(body) > 150
    cut = passages(doc, "config", Segmentation(count, 160, min_chars=200))
    assert cut[-1].text.endswith("See also: log, monitor-uri.") and not cut[-1].text.startswith("See also")
    unmerged = passages(doc, "config", Segmentation(count, 160, min_chars=0))
    assert unmerged[-1].text == "See also: log, monitor-uri."


def test_titles_lose_pilcrows_and_site_suffixes():
    assert clean_title("Install \u00b6 \u2014 Relay 2.1 documentation") == "Install"
    assert clean_title("Logging | Acme Docs") == "Logging"
    assert clean_title("HAProxy version 2.6.12-1+deb12u4") == "HAProxy"
    assert clean_title("Postfix Basic Configuration") == "Postfix Basic Configuration"


def test_fragments_join_the_next_section_of_their_page(count):
    html = (
        "<html><head><title>Guide</title></head><body><h1>Guide</h1><h2>3. Relaying</h2><p>See below.</p>"
        "<h3>3.1 Smarthost</h3><p>" + "Set relayhost to the ISP's mail hub. " * 8 + "</p>"
        "<h3>3.2 Notes</h3><p>" + "Relaying needs a network. " * 10 + "</p><h3>3.3 Last</h3><p>Short.</p></body></html>"
    )
    cut = passages(read_html(html), "guide", Segmentation(count, 256, min_chars=200))
    assert [p.title for p in cut] == ["Guide > 3. Relaying > 3.1 Smarthost", "Guide > 3. Relaying > 3.2 Notes"]
    assert cut[0].text.startswith("3. Relaying\n\nSee below.\n\n3.1 Smarthost\n\nSet relayhost")
    assert cut[1].text.endswith("3.3 Last\n\nShort.")  # the last fragment joins the section before it
    whole = passages(read_html(html), "guide", Segmentation(count, 256, min_chars=0))
    assert len(whole) == 4


def test_code_blocks_stay_whole_in_their_passage(count):
    prose = "The daemon reads its configuration at start. " * 12
    code = "\n".join(f"option{i} = value{i}" for i in range(12))
    html = f"<html><body><h1>Config</h1><p>{prose}</p><p>{prose}</p><pre>{code}</pre><p>{prose}</p></body></html>"
    cut = passages(read_html(html), "config", Segmentation(count, 160, min_chars=0))
    assert len(cut) > 1 and all(count(p.text) <= 160 for p in cut)
    assert sum(code in p.text for p in cut) == 1


def test_restructuredtext_is_read_with_its_sections(tmp_path):
    rst = (
        "Logging\n=======\n\nThe daemon logs to syslog.\n\nRotation\n--------\n\nLogs rotate daily.\n\n"
        ".. code-block:: sh\n\n   logrotate -f /etc/logrotate.conf\n"
    )
    parts = sections(read_page(_page(tmp_path, "logging.rst", rst), PageKind.RST), "logging")
    assert [p.title for p in parts] == ["Logging", "Logging > Rotation"]
    assert "logrotate -f /etc/logrotate.conf" in parts[1].text


def _pdf(text_lines: list[str], *more_pages: list[str]) -> bytes:
    """A PDF whose pages' text layers hold ``text_lines`` and each of ``more_pages`` (written by hand: no PDF writer is
    a dependency); a line starting with a blank leaves a blank line before it (a new text block); a line starting
    with a backquote (after that blank) is set in Courier, the others in Helvetica."""
    pages = [text_lines, *more_pages]
    n = len(pages)
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>"]

    def shown(line: str) -> str:
        font, text = ("/F2", line.strip()[1:]) if line.strip().startswith("`") else ("/F1", line.strip())
        return ("T* " if line.startswith(" ") else "") + f"{font} 12 Tf ({text}) Tj T*"

    for i, lines in enumerate(pages):
        stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(shown(line) for line in lines) + " ET"
        fonts = f"/F1 {3 + 2 * n} 0 R /F2 {4 + 2 * n} 0 R"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R /Resources << /Font << {fonts} >> >> >>")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>")
    out = "%PDF-1.4\n"
    offsets = []
    for n, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{obj}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out.encode("latin-1")


def test_pdf_text_is_read_and_a_pdf_without_text_is_refused_with_the_reason(tmp_path):
    doc = read_page(_page(tmp_path, "manual.pdf", _pdf(["Rotate the logs with", "logrotate every night."])), PageKind.PDF)
    text = " ".join(b.text for b in doc.blocks)
    assert "Rotate the logs with" in text and "logrotate every night." in text
    with pytest.raises(UnreadablePage, match="no text layer"):
        read_page(_page(tmp_path, "scan.pdf", _pdf([])), PageKind.PDF)
    with pytest.raises(UnreadablePage, match="could not be read"):
        read_page(_page(tmp_path, "broken.pdf", b"%PDF-1.4 not really"), PageKind.PDF)
    # pypdf reads it, pdfminer.six raises TypeError on the page's size: that page is skipped, not the whole ingest
    odd = _pdf(["Rotate the logs."]).replace(b"/MediaBox [0 0 612 792]", b"/MediaBox [0 0 a b]")
    with pytest.raises(UnreadablePage, match="^the PDF's text could not be read: TypeError"):
        read_page(_page(tmp_path, "odd.pdf", odd), PageKind.PDF)


def test_a_pdfs_code_listing_keeps_its_lines(tmp_path):
    """A PDF manual's examples (auto-multiple-choice's, set in DejaVu Sans Mono) were reflowed into prose ("PaperSize: A4
    Lang: FR CompleteMulti: 0 ..."): a text block mostly in a monospaced font is now a code block, its lines kept,
    joined with the next such block; the prose around it is read as before."""
    pdf = _pdf(
        [
            "Write the options file as follows:",
            " `PaperSize: A4",
            "`Lang: FR",
            "`ShuffleQuestions: 0",
            " `LaTeX: 1",
            " Then compile the subject",
            "with the same command.",
        ]
    )
    doc = read_page(_page(tmp_path, "amc.pdf", pdf), PageKind.PDF)
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.PROSE, "Write the options file as follows:"),
        (BlockKind.CODE, "PaperSize: A4\nLang: FR\nShuffleQuestions: 0\nLaTeX: 1"),
        (BlockKind.PROSE, "Then compile the subject with the same command."),
    ]
    # a PDF whose body is monospaced (a text file printed): its hard-wrapped lines are prose, as before
    typed = _pdf(["`Rotate the logs with", "`logrotate every night.", " `Keep four weeks of", "`them on the disk.", " Short note."])
    doc = read_page(_page(tmp_path, "typed.pdf", typed), PageKind.PDF)
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.PROSE, "Rotate the logs with logrotate every night."),
        (BlockKind.PROSE, "Keep four weeks of them on the disk."),
        (BlockKind.PROSE, "Short note."),
    ]


def test_a_pdf_is_cut_at_its_bookmarks_without_running_heads_page_numbers_or_front_matter(tmp_path):
    """A PDF manual came out as passages all titled with the PDF's title, its contents pages among them, and pypdf ran
    a TeX PDF's words together ("Descriptionofacopy"): sections now start at the PDF's bookmarks."""
    from pypdf import PdfReader, PdfWriter

    head = ["Widget Manual"]
    pages = [
        [*head, " Contents", " 1 Installing . . . . . . . . . . 2", "2 Configuring . . . . . . . . . 3", " 1 / 5"],
        [*head, " 1 Installing", " Run the installer as root, then restart", "the widget daemon.", " }", " Then log in.", " 2 / 5"],
        [*head, " 1.1 Upgrading", " Upgrades keep the settings file.", " }", " Nothing else.", " 3 / 5"],
        [*head, " 2 Configuring", " Edit widget.conf and reload the daemon.", " }", " Then reload it with", " 4 / 5"],
        [*head, " systemctl reload widget, as root.", " 5 / 5"],
    ]
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(_pdf(*pages))))
    installing = writer.add_outline_item(title="Installing", page_number=1)
    writer.add_outline_item(title="Upgrading", page_number=2, parent=installing)
    writer.add_outline_item(title="Configuring", page_number=3)
    writer.add_metadata({"/Title": "Widget Manual"})
    path = tmp_path / "manual.pdf"
    with path.open("wb") as f:
        writer.write(f)
    doc = read_page(path, PageKind.PDF)
    assert [(b.kind, b.text, b.level) for b in doc.blocks if b.kind is BlockKind.HEADING] == [
        (BlockKind.HEADING, "Installing", 1),
        (BlockKind.HEADING, "Upgrading", 2),
        (BlockKind.HEADING, "Configuring", 1),
    ]
    text = "\n".join(b.text for b in doc.blocks)
    assert "Run the installer as root, then restart the widget daemon." in text  # the box's lines joined
    assert "Widget Manual" not in text and "/ 5" not in text and "Contents" not in text and ". . ." not in text
    assert text.count("}") == 3  # a line repeated inside pages (a code example's brace) is no running head
    assert "Then reload it with systemctl reload widget, as root." in text  # a sentence cut by a page break
    assert [p.title for p in sections(doc, "manual")] == [
        "Widget Manual > Installing",
        "Widget Manual > Installing > Upgrading",
        "Widget Manual > Configuring",
    ]


def test_plain_text_paragraphs_are_reflowed_and_indented_blocks_kept_as_code(tmp_path):
    text = "Ledger keeps seven years\nof invoices.\n\nTo export them run:\n\n    ledger export --all\n      --format csv\n"
    doc = read_page(_page(tmp_path, "notes.txt", text), PageKind.TEXT)
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.PROSE, "Ledger keeps seven years of invoices."),
        (BlockKind.PROSE, "To export them run:"),
        (BlockKind.CODE, "    ledger export --all\n      --format csv"),
    ]


def test_short_section_is_kept_whole(count):
    assert split_section("A short paragraph.", count, 512) == ["A short paragraph."]


def test_long_section_split_at_paragraphs_within_limit(count):
    paragraphs = [f"Paragraph {i}. " + " ".join(f"word{i}x{j}" for j in range(60)) for i in range(12)]
    text = "\n\n".join(paragraphs)
    assert count(text) > 512
    chunks = split_section(text, count, 512)
    assert len(chunks) > 1
    assert all(count(c) <= 512 for c in chunks)
    # Paragraph boundaries are kept: every paragraph lies whole in one chunk, in order.
    joined = "\n\n".join(chunks)
    assert joined.split("\n\n") == paragraphs


def test_long_paragraph_split_at_sentences_then_words(count):
    sentences = [f"Sentence number {i} talks about invoices and refunds and taxes." for i in range(80)]
    giant_sentence = " ".join(f"token{i}" for i in range(700))
    text = " ".join(sentences) + " " + giant_sentence + "."
    chunks = split_section(text, count, 64)
    assert all(count(c) <= 64 for c in chunks)
    # sentence boundaries: no sentence of the first part is cut
    for s in sentences:
        assert any(s in c for c in chunks)
    # every word survives, in order
    assert " ".join(chunks).split() == text.split()
