"""Sentences of hard-wrapped text (issue 48, "Quotes in whole sentences"): wrapped lines are joined, a command stays
with the sentence that introduces it, code blocks stay whole, list items and paragraphs still end sentences (the
extractive quote on the real encoder: tests/integration/generation/test_sentences_quote.py)."""

from __future__ import annotations

from service.text import sentence_bounds, sentences

# A man page as <pre> keeps it: justified, hard-wrapped at 78 columns, indented 7, options with hanging indents.
MAN_PAGE = """\
DESCRIPTION
       The  wc  utility  prints  newline, word, and byte counts for each FILE,
       and a total line if more than one FILE is specified.  A word is a  non-
       zero-length sequence of characters delimited by white space.

       When the whole file is what you want to count the words in, use this
           wc -w notes.txt
       The count is printed before the file name.

       -l, --lines
              print the newline counts.  With no FILE, or when FILE is -, read
              standard input."""

# HTML whose source line breaks sit inside <p>, as the loader keeps them (gnuplot's LaTeX2HTML manual).
HTML_SOURCE = """\
The option polardistance determines if the distance between the mouse cursor
and the ruler is also shown in polar coordinates. The default key setting is given, and an
example of changing it is shown below. By default the ruler has the key binding 'r'."""


def _bounds_are_trimmed_offsets(text: str) -> None:
    for a, b in sentence_bounds(text):
        assert 0 <= a < b <= len(text) and text[a:b] == text[a:b].strip()


def test_hard_wrapped_lines_are_joined_into_whole_sentences():
    assert sentences(HTML_SOURCE) == [
        "The option polardistance determines if the distance between the mouse cursor\nand the ruler is also shown in polar coordinates.",
        "The default key setting is given, and an\nexample of changing it is shown below.",
        "By default the ruler has the key binding 'r'.",
    ]
    man = sentences(MAN_PAGE)
    assert man[1] == (
        "The  wc  utility  prints  newline, word, and byte counts for each FILE,\n       and a total line if more than one FILE is specified."
    )
    assert man[2].startswith("A word is a  non-\n       zero-length") and man[2].endswith("white space.")
    # The option's description, wrapped under its hanging indent, is one sentence with its name.
    assert "-l, --lines\n              print the newline counts." in man
    assert "standard input." in man[-1] and man[-1].startswith("With no FILE")
    _bounds_are_trimmed_offsets(MAN_PAGE)


def test_a_command_stays_with_the_sentence_that_introduces_it():
    intro = "When the whole file is what you want to count the words in, use this"
    man = sentences(MAN_PAGE)
    assert f"{intro}\n           wc -w notes.txt" in man
    assert man[man.index(f"{intro}\n           wc -w notes.txt") + 1] == "The count is printed before the file name."
    # Not indented, after a colon, or a block of several lines: the same.
    assert sentences(f"{intro}\nwc -w notes.txt") == [f"{intro}\nwc -w notes.txt"]
    conf = "To hide the version, set in main.cf:\n    smtpd_banner = $myhostname ESMTP\n    biff = no\nThen reload Postfix. It applies at once."
    assert sentences(conf) == [
        "To hide the version, set in main.cf:\n    smtpd_banner = $myhostname ESMTP\n    biff = no",
        "Then reload Postfix.",
        "It applies at once.",
    ]
    # After a sentence that ends, the command is a unit of its own; a blank line always ends a sentence.
    assert sentences("Count the words.\n    wc -w notes.txt") == ["Count the words.", "wc -w notes.txt"]
    assert sentences(f"{intro}\n\n    wc -w notes.txt") == [intro, "wc -w notes.txt"]


def test_a_code_block_is_one_unit_not_cut_at_its_periods():
    sql = "-- Schema. Both tables start empty.\nCREATE TABLE artist(\n  artistid    INTEGER PRIMARY KEY,\n  artistname  TEXT\n);"
    assert sentences(sql) == [sql]
    shell = "$ git commit -m 'Fix the parser. Now it works'\n$ git push origin main"
    assert sentences(shell) == [shell]
    python = "class C(ABC):\n    @property\n    def name(self):\n        ...\nexcept OSError as err:\n    print(err)"
    assert sentences(python) == [python]
    fenced = "Install it:\n```\npip install fedqa. Then\n```\nThen run it."
    assert sentences(fenced) == ["Install it:\n```\npip install fedqa. Then\n```", "Then run it."]
    _bounds_are_trimmed_offsets(sql + "\n\n" + shell)


def test_list_items_table_rows_and_other_scripts_keep_their_own_sentences():
    items = "Steps:\n- Open the settings page and\n  click Reset. Then wait.\n* Confirm\n• Done\n1. One\n2. Two"
    assert sentences(items) == [
        "Steps:",
        "- Open the settings page and\n  click Reset.",
        "Then wait.",
        "* Confirm",
        "• Done",
        "1. One",
        "2. Two",
    ]
    rows = "package | size | description\nbash | 7163 | the GNU shell\ndash | 191 | a small shell"
    assert sentences(rows) == rows.splitlines()
    assert sentences("要重置密码，请打开设置\n页面。然后点击按钮！") == ["要重置密码，请打开设置\n页面。", "然后点击按钮！"]
    assert sentences("هل تريد المتابعة؟ اضغط على الزر.") == ["هل تريد المتابعة؟", "اضغط على الزر."]
