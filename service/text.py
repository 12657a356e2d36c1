"""How text is cut into words and sentences, in any script (one home for the patterns every layer uses).

- A word is a run of Unicode letters, combining marks and digits ("zurückzusetzen", "إعادة", "2fa" are one
  word each); a Chinese, Japanese or Korean ideograph, or a kana, is a word by itself, since those scripts
  write no spaces between words. The text is NFC-normalised and case-folded first.
- A sentence ends at ``.``, ``!``, ``?`` or ``؟`` followed by white space and a capital, a letter of a script
  without case, a digit, a quote or a bracket; and right after ``。``, ``！``, ``？`` (with any closing
  quotes or brackets), which need no space after them.
- A message asks several questions where a sentence ends and the next begins with a joining word (``And``,
  ``Also``, ``Plus``, ``Additionally``): "How do I strip HTML from a string? And, how do I report a bug in
  Debian?" is two; two sentences of one question ("I get warnings when I compile. Is this a problem?") are one.
"""

from __future__ import annotations

import re
import unicodedata
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


def words(text: str) -> list[str]:
    """The words of ``text``, NFC-normalised and case-folded, in order."""
    return WORD.findall(unicodedata.normalize("NFC", text).casefold())


def terms(text: str) -> set[str]:
    """Case-folded content words of ``text`` (:func:`words` less :data:`STOPWORDS`: a CJK character is a word)."""
    return {w for w in words(text) if w not in STOPWORDS}


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the sentences of ``text`` (newlines also end a sentence)."""
    out: list[tuple[int, int]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        cuts = [0] + [m.end() for m in SENTENCE_BREAK.finditer(line)] + [len(line)]
        for a, b in pairwise(cuts):
            seg = line[a:b]
            if seg.strip():
                lead = len(seg) - len(seg.lstrip())
                out.append((pos + a + lead, pos + a + len(seg.rstrip())))
        pos += len(line)
    return out


def sentences(text: str) -> list[str]:
    """Split a passage into sentences (newlines also end a sentence)."""
    return [text[a:b] for a, b in sentence_bounds(text)]


def split_questions(text: str) -> list[str]:
    """The questions of a message (one item: it asks one thing); at most :data:`MAX_QUESTIONS`, the last
    keeping the rest of the text."""
    parts = [p.strip() for p in _JOIN.split(text) if p.strip()]
    if len(parts) > MAX_QUESTIONS:
        parts = parts[: MAX_QUESTIONS - 1] + [" ".join(parts[MAX_QUESTIONS - 1 :])]
    return parts or [text]
