"""Extractive answers: sentences quoted from the top passages, each with its citation."""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.retrieval.passage import RankedHit

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the this to what when where which who why "
    "with you your".split()
)


def terms(text: str) -> set[str]:
    """Lower-cased content words of ``text``."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def sentences(text: str) -> list[str]:
    """Split a passage into sentences (newlines also end a sentence)."""
    out: list[str] = []
    for block in text.splitlines():
        out.extend(s.strip() for s in _SENTENCE.split(block) if s.strip())
    return out


def extractive_answer(query: str, hits: Sequence[RankedHit], *, max_sentences: int = 3, max_sources: int = 3) -> str | None:
    """Quote the sentences of the top passages that share most terms with the query, cited as [n].

    Sentences keep the order of their sources. None when there is nothing to quote.
    """
    q = terms(query)
    scored: list[tuple[float, int, int, str]] = []
    for i, h in enumerate(hits[:max_sources], 1):
        for j, sent in enumerate(sentences(h.passage.text)):
            overlap = len(q & terms(sent))
            # Prefer overlap, then higher-ranked sources, then earlier sentences.
            scored.append((overlap + 1.0 / (i + 1) + 0.01 / (j + 1), i, j, sent))
    if not scored:
        return None
    best = sorted(scored, key=lambda t: -t[0])[:max_sentences]
    best.sort(key=lambda t: (t[1], t[2]))
    return " ".join(f"{s} [{i}]" for _, i, _, s in best)
