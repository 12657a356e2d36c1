"""The answer prompt (numbered sources, one-shot completion) and citation handling."""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.retrieval.passage import RankedHit
from service.text import sentences, terms

STOP = ["\nQuestion:", "\nSources:", "\nSource:", "\n\n"]

_EXAMPLE = (
    "Sources:\n"
    "[1] (Acme Mail > Filters) To create a filter, open Settings > Filters, click New filter and choose a condition.\n"
    "[2] (Acme Calendar > Sharing) Calendars can be shared with read-only or edit access.\n"
    "Question: How do I make a mail filter?\n"
    "Answer: Open Settings > Filters, click New filter and choose a condition [1].\n\n"
)

_CITATION = re.compile(r"\[(\d{1,2})\]")


def _clip(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def build_prompt(query: str, hits: Sequence[RankedHit], *, passage_words: int = 120) -> str:
    """One-shot completion prompt: an example, then the numbered sources and the question."""
    lines = [
        "Answer the question using only the numbered sources. Cite each source you use as [1], [2].\n\n",
        _EXAMPLE,
        "Sources:\n",
    ]
    for i, h in enumerate(hits, 1):
        lines.append(f"[{i}] ({h.passage.title}) {_clip(h.passage.text, passage_words)}\n")
    lines.append(f"Question: {query.strip()}\nAnswer:")
    return "".join(lines)


def citations(answer: str, n_sources: int) -> list[int]:
    """Source numbers cited in ``answer`` that exist (1-based, in order of first use)."""
    seen: list[int] = []
    for m in _CITATION.finditer(answer):
        k = int(m.group(1))
        if 1 <= k <= n_sources and k not in seen:
            seen.append(k)
    return seen


def drop_bad_citations(answer: str, n_sources: int) -> str:
    """Remove citation markers that point past the numbered sources."""
    return _CITATION.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= n_sources else "", answer).strip()


def attribute(answer: str, hits: Sequence[RankedHit], *, min_overlap: int = 2) -> str:
    """Add a citation to each uncited sentence of ``answer``: the source sharing most terms with it.

    Used when a model answers without citing; a sentence sharing fewer than ``min_overlap``
    terms with every source is left uncited.
    """
    out = []
    for sent in sentences(answer):
        if _CITATION.search(sent):
            out.append(sent)
            continue
        words = terms(sent)
        best, best_k = 0, 0
        for k, h in enumerate(hits, 1):
            overlap = len(words & terms(h.passage.text))
            if overlap > best:
                best, best_k = overlap, k
        out.append(f"{sent} [{best_k}]" if best >= min_overlap else sent)
    return " ".join(out)


def grounding(answer: str, hits: Sequence[RankedHit]) -> float:
    """Share of the answer's content words that occur in the sources (1.0: every word is grounded)."""
    words = terms(_CITATION.sub(" ", answer))
    if not words:
        return 0.0
    context: set[str] = set()
    for h in hits:
        context |= terms(h.passage.text) | terms(h.passage.title)
    return len(words & context) / len(words)
