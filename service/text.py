"""How text is cut into words and sentences, in any script (one home for the patterns every layer uses).

- A word is a run of Unicode letters, combining marks and digits ("zurückzusetzen", "إعادة", "2fa" are one
  word each); a Chinese, Japanese or Korean ideograph, or a kana, is a word by itself, since those scripts
  write no spaces between words. The text is NFC-normalised and case-folded first.
- A sentence ends at ``.``, ``!``, ``?`` or ``؟`` followed by white space and a capital, a letter of a script
  without case, a digit, a quote or a bracket; and right after ``。``, ``！``, ``？`` (with any closing
  quotes or brackets), which need no space after them.
"""

from __future__ import annotations

import unicodedata

import regex

# Scripts written without spaces between words: each character is a word.
_IDEOGRAPHIC = r"\p{Han}\p{Hiragana}\p{Katakana}"
WORD = regex.compile(rf"[{_IDEOGRAPHIC}]|(?:(?![{_IDEOGRAPHIC}])[\p{{L}}\p{{M}}\p{{N}}])+")
_CJK_END = r"(?<=[。！？][」』”’）)]*)(?![。！？」』”’）)])\s*(?=\S)"
SENTENCE_BREAK = regex.compile(rf"(?<=[.!?؟])\s+(?=[\p{{Lu}}\p{{Lt}}\p{{Lo}}\p{{N}}\"'(])|{_CJK_END}")
# Where a long paragraph may be split (index segmentation): any white space after an end mark, or after 。！？.
SENTENCE_END = regex.compile(rf"(?<=[.!?؟])\s+|{_CJK_END}")


def words(text: str) -> list[str]:
    """The words of ``text``, NFC-normalised and case-folded, in order."""
    return WORD.findall(unicodedata.normalize("NFC", text).casefold())
