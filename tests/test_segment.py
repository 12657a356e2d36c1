"""Segmentation at headers and the hierarchical 512-token split, with the retriever's tokenizer."""

import pytest

from indexes.segment import segment_html, segment_markdown, segment_text, split_section


@pytest.fixture(scope="module")
def count(encoder):
    return encoder.count_tokens


def test_markdown_sections_carry_title_path_and_ignore_fenced_headers():
    md = (
        "# Billing guide\n\nIntro text.\n\n## Invoices\n\nInvoice text.\n\n### Credit notes\n\nCredit text.\n\n"
        "```bash\n# not a header\necho hi\n```\n\n## Taxes\n\nTax text.\n"
    )
    sections = segment_markdown(md, "fallback")
    assert [s.title for s in sections] == [
        "Billing guide",
        "Billing guide > Invoices",
        "Billing guide > Invoices > Credit notes",
        "Billing guide > Taxes",
    ]
    assert "# not a header" in sections[2].text
    assert sections[3].text == "Tax text."


def test_markdown_without_h1_uses_fallback_title():
    sections = segment_markdown("## Setup\n\nDo this.\n", "install")
    assert sections[0].title == "install > Setup"


def test_html_sections_at_heading_tags_without_scripts():
    html = (
        "<html><head><title>Relay docs</title><script>var x=1;</script></head><body><nav>menu</nav>"
        "<h1>Relay docs</h1><p>Welcome.</p><h2>Macros</h2><p>Macros save replies.</p><ul><li>One</li><li>Two</li></ul>"
        "<h3>Sharing</h3><p>Share with a team.</p></body></html>"
    )
    sections = segment_html(html, "page")
    titles = [s.title for s in sections]
    assert titles == ["Relay docs", "Relay docs > Macros", "Relay docs > Macros > Sharing"]
    assert "Macros save replies." in sections[1].text and "Two" in sections[1].text
    assert all("var x" not in s.text and "menu" not in s.text for s in sections)


def test_plain_text_is_one_section():
    assert segment_text("  hello  ", "notes")[0].title == "notes"
    assert segment_text("   ", "notes") == []


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
