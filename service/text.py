"""How text is cut into words and sentences, in any script (one home for the patterns every layer uses).

- A word is a run of Unicode letters, combining marks and digits ("zurückzusetzen", "إعادة", "2fa" are one
  word each); a Chinese, Japanese or Korean ideograph, or a kana, is a word by itself, since those scripts
  write no spaces between words. The text is NFC-normalised and case-folded first.
- A sentence ends at ``.``, ``!``, ``?`` or ``؟`` followed by white space and a capital, a letter of a script
  without case, a digit, a quote or a bracket; and right after ``。``, ``！``, ``？`` (with any closing
  quotes or brackets), which need no space after them.
- Sentences are cut per paragraph (a blank line always ends a sentence), line by line: a single newline inside
  prose is a space (hard-wrapped man pages, plain text, Markdown and HTML source lines are joined again). A line
  starting with ``-``, ``*``, ``•``, ``+`` or ``1.`` (a list item), or a table row (cells between ``|``), starts
  a sentence. Code is kept whole: consecutive code lines are one unit, never cut at a ``.`` inside, and a
  sentence ending in ``:`` or with no end mark takes the code lines that follow it ("use this\\n    wc -w
  file" is one sentence). A line is code when it is inside a ``` fence, starts with a shell or REPL prompt
  (``$``, ``#``, ``>>>``, ``sqlite>``, ``postgres=#``), an assignment (``key = value``) or a comment
  (``//``, ``--``), opens or closes a bracket at its end or start, belongs to a block indented deeper than the
  line before it whose last line has no end mark, or has no end mark and sits between code lines (``else:``); a
  line that reads as neither prose (three plain words in a row, words of a script without case, or an end mark
  at its end) nor code is code unless prose resumes after it in lower case ("-l, --lines\\n    print the
  newline counts." is one sentence). Offsets always index the original text.
- A message asks several questions where a sentence ends and the next begins with a joining word (``And``,
  ``Also``, ``Plus``, ``Additionally``): "How do I strip HTML from a string? And, how do I report a bug in
  Debian?" is two; two sentences of one question ("I get warnings when I compile. Is this a problem?") are one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

import regex

# Scripts written without spaces between words: each character is a word.
_IDEOGRAPHIC = r"\p{Han}\p{Hiragana}\p{Katakana}"
WORD = regex.compile(rf"[{_IDEOGRAPHIC}]|(?:(?![{_IDEOGRAPHIC}])[\p{{L}}\p{{M}}\p{{N}}])+")
_CJK_END = r"(?<=[。！？][」』”’）)]*)(?![。！？」』”’）)])\s*(?=\S)"
SENTENCE_BREAK = regex.compile(rf"(?<=[.!?؟])\s+(?=[\p{{Lu}}\p{{Lt}}\p{{Lo}}\p{{N}}\"'(])|{_CJK_END}")
# Where a long paragraph may be split (index segmentation): any white space after an end mark, or after 。！？.
SENTENCE_END = regex.compile(rf"(?<=[.!?؟])\s+|{_CJK_END}")
_JOIN = re.compile(r"(?<=[?.!])\s+(?:and|also|plus|additionally)\b[,:]?\s+", re.IGNORECASE)
MAX_QUESTIONS = 4
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the this to what when where which who why with you your".split()
)

# Lines: what each kind looks like (see the module docstring).
_CLOSERS = r"[\"'”’)\]」』）]*"
_FINAL = regex.compile(rf"(?<!\.)[.!?؟。！？]{_CLOSERS}$")  # a sentence's end mark (an ellipsis is none)
PROSE_END = regex.compile(rf"(?<!\.)[.!?؟。！？:：]{_CLOSERS}$")  # ... or a colon: the line ends as prose does
_FENCE = re.compile(r"\s*(?:```|~~~)")
_ITEM = regex.compile(r"\s*(?:[-*•‣◦+]|\d+[.)])\s+\S")
_NUMBERED = re.compile(r"\s*\d+[.)]\s+")
_TABLE_ROW = re.compile(r"\s*\|.*\|\s*$|[^|]*\S\s+\|\s+[^|]*\s\|\s")
_PROMPT = regex.compile(r"\s*(?:[$%#]|>>>|\.\.\.|[\w.-]+>|\w+[=-][#>])(?:\s|$)")
_ASSIGNMENT = regex.compile(r"\s*[$@%]?[\w.\[\]\"'-]+\s*[-+*/.|&:]?=(?!=)")
_COMMENT = re.compile(r"\s*(?://|/\*|\*/|--\s|<!--)")
_BRACKET_EDGE = re.compile(r"\s*[}\])]|.*[{\[(\\]\s*$")
_PLAIN_WORD = regex.compile(r"[(\"'“‘]*[\p{L}\p{M}]*[\p{Ll}\p{Lo}][\p{L}\p{M}]*(?:['’-][\p{L}\p{M}]+)*-?[)\"'”’]*[,.;:!?]?[)\"'”’]*")
_CASELESS_WORD = regex.compile(r"\p{Lo}{2}")
_PROSE_RUN = 3  # plain words in a row that read as prose, not as a command ("wc -w file.txt" has none)


class LineKind(Enum):
    """What a line of a paragraph is, for cutting sentences."""

    PROSE = "prose"  # joined to the line before it; its sentences end at end marks
    ITEM = "item"  # a list item or a table row: starts a sentence
    CODE = "code"  # kept whole with the code lines around it
    UNCLEAR = "unclear"  # reads as neither: code, unless lower-case prose resumes after it


@dataclass(frozen=True)
class Line:
    """One non-blank line: its offsets in the text (from its first to after its last non-space character), its
    indentation and its kind."""

    start: int
    end: int
    indent: int
    kind: LineKind


def words(text: str) -> list[str]:
    """The words of ``text``, NFC-normalised and case-folded, in order."""
    return WORD.findall(unicodedata.normalize("NFC", text).casefold())


def english_stemmer():  # noqa: ANN201 - PyStemmer's Stemmer
    """A new English (Snowball) stemmer, the one the lexical index and the vocabulary share (not thread-safe: one per
    thread or behind a lock)."""
    import Stemmer

    return Stemmer.Stemmer("english")


@functools.lru_cache(maxsize=1024)
def terms(text: str) -> frozenset[str]:
    """Case-folded content words of ``text`` (:func:`words` less :data:`STOPWORDS`: a CJK character is a word).

    Cached (the most recent 1,024 texts, a few MB): fitting the answer policy reads a question's passages' terms once
    per policy it tries, and the word pattern is most of that time."""
    return frozenset(w for w in words(text) if w not in STOPWORDS)


def reads_as_prose(line: str) -> bool:
    """Whether a line reads as prose: three plain words in a row, words of a script without case, or an end mark
    (or a colon) at its end."""
    if PROSE_END.search(line.rstrip()) or _CASELESS_WORD.search(line):
        return True
    run = 0
    for token in line.split():
        run = run + 1 if _PLAIN_WORD.fullmatch(token) else 0
        if run >= _PROSE_RUN:
            return True
    return False


def _line_kind(line: str) -> LineKind:
    """The kind of a line by its own text (indentation and neighbours are weighed by :func:`_paragraphs`)."""
    if _ITEM.match(line):
        return LineKind.ITEM
    if _PROMPT.match(line) or _ASSIGNMENT.match(line) or _COMMENT.match(line) or _BRACKET_EDGE.match(line):
        return LineKind.CODE
    if _TABLE_ROW.match(line):
        return LineKind.ITEM
    return LineKind.PROSE if reads_as_prose(line) else LineKind.UNCLEAR


def _paragraphs(text: str) -> list[list[Line]]:
    """The non-blank lines of ``text`` by paragraph (blank lines separate them), each with its own kind; lines
    inside a ``` fence are code, blank lines there too."""
    paragraphs: list[list[Line]] = [[]]
    pos, fenced = 0, False
    for raw in text.splitlines(keepends=True):
        line = raw.rstrip()
        start, pos = pos, pos + len(raw)
        if not line.strip():
            paragraphs.append([])
            continue
        fence = bool(_FENCE.match(line))
        kind = LineKind.CODE if fenced or fence else _line_kind(line)
        fenced ^= fence
        indent = len(line) - len(line.lstrip())
        paragraphs[-1].append(Line(start + indent, start + len(line), indent, kind))
    return [_settle(text, p) for p in paragraphs if p]


def _settle(text: str, lines: list[Line]) -> list[Line]:
    """The kinds of a paragraph's lines weighed with their indentation and neighbours (see the steps below)."""
    kinds = [line.kind for line in lines]
    _indented_code(text, lines, kinds)
    for i, kind in enumerate(kinds):
        if kind is LineKind.UNCLEAR:
            before = next((k for k in reversed(kinds[:i]) if k is not LineKind.UNCLEAR), None)
            after = next((n for n in range(i + 1, len(kinds)) if kinds[n] is not LineKind.UNCLEAR), None)
            resumes = after is not None and kinds[after] is LineKind.PROSE and text[lines[after].start].islower()
            kinds[i] = LineKind.PROSE if resumes and before is not LineKind.CODE else LineKind.CODE
    # A line with no end mark between code lines ("except OSError as err:", "else:") is code.
    for i in range(1, len(lines) - 1):
        if kinds[i - 1] is kinds[i + 1] is LineKind.CODE and kinds[i] is LineKind.PROSE:
            if not _FINAL.search(text[lines[i].start : lines[i].end]):
                kinds[i] = LineKind.CODE
    return [Line(line.start, line.end, line.indent, kind) for line, kind in zip(lines, kinds, strict=True)]


def _indented_code(text: str, lines: list[Line], kinds: list[LineKind]) -> None:
    """Mark as code each block indented deeper than the line before it whose last line has no end mark (nor colon);
    a block that ends as prose (a hanging indent, a wrapped list item) stays as it is, though a deeper block
    inside it may still be code."""
    i = 1
    while i < len(lines):
        if lines[i].indent <= lines[i - 1].indent or kinds[i] is LineKind.ITEM:
            i += 1
            continue
        j = i
        while j + 1 < len(lines) and lines[j + 1].indent >= lines[i].indent and kinds[j + 1] is not LineKind.ITEM:
            j += 1
        if PROSE_END.search(text[lines[i].start : lines[j].end]):
            i += 1
        else:
            kinds[i : j + 1] = [LineKind.CODE] * (j + 1 - i)
            i = j + 1


def _prose_bounds(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sentences of the prose ``text[start:end]`` (a newline in it is white space like any other)."""
    seg = text[start:end]
    number = _NUMBERED.match(seg)  # "1. Open Settings" is one sentence, not "1." and "Open Settings"
    cuts = [m.end() for m in SENTENCE_BREAK.finditer(seg) if not number or m.end() > number.end()]
    out = []
    for a, b in pairwise([0, *cuts, len(seg)]):
        part = seg[a:b]
        if part.strip():
            lead = len(part) - len(part.lstrip())
            out.append((start + a + lead, start + a + len(part.rstrip())))
    return out


def _paragraph_bounds(text: str, lines: list[Line]) -> list[tuple[int, int]]:
    """Sentences of one paragraph: prose runs (each list item starts one) cut at end marks; a code block joins the
    sentence before it when that one ends in ':' or with no end mark, else it is a unit of its own."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        code = lines[i].kind is LineKind.CODE
        j = i + 1
        while j < len(lines) and lines[j].kind is (LineKind.CODE if code else LineKind.PROSE):
            j += 1
        if not code:
            out.extend(_prose_bounds(text, lines[i].start, lines[j - 1].end))
        elif out and not _FINAL.search(text[out[-1][0] : out[-1][1]]):
            out[-1] = (out[-1][0], lines[j - 1].end)
        else:
            out.append((lines[i].start, lines[j - 1].end))
        i = j
    return out


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of ``text`` (see the module docstring: paragraphs, joined
    hard-wrapped lines, list items, code kept whole with the sentence that introduces it)."""
    return [bound for lines in _paragraphs(text) for bound in _paragraph_bounds(text, lines)]


def sentences(text: str) -> list[str]:
    """Split a passage into sentences (see :func:`sentence_bounds`)."""
    return [text[a:b] for a, b in sentence_bounds(text)]


def split_questions(text: str) -> list[str]:
    """The questions of a message (one item: it asks one thing); at most :data:`MAX_QUESTIONS`, the last
    keeping the rest of the text."""
    parts = [p.strip() for p in _JOIN.split(text) if p.strip()]
    if len(parts) > MAX_QUESTIONS:
        parts = parts[: MAX_QUESTIONS - 1] + [" ".join(parts[MAX_QUESTIONS - 1 :])]
    return parts or [text]
