"""The extractive quote on the real encoder is whole sentences, with the command a sentence introduces."""

from __future__ import annotations

from service.generation.extractive import ExtractConfig, Extractor, by_terms
from service.retrieval.passage import Passage, RankedHit
from service.retrieval.results import Question
from service.text import sentence_bounds
from tests.unit.service.generation.test_sentences import HTML_SOURCE, MAN_PAGE


def _hit(i: int, text: str) -> RankedHit:
    return RankedHit(Passage(f"coreutils/wc#{i:03d}", "coreutils", "wc(1)", "coreutils/wc.1.html", text), 0.6, 0.9, 0.55)


def _sentence_edges(text: str) -> tuple[set[int], set[int]]:
    bounds = sentence_bounds(text)
    return {a for a, _ in bounds}, {b for _, b in bounds}


def test_the_extractive_quote_is_whole_sentences_with_the_command(encoder):
    question = "How do I count the words in a whole file?"
    hits = [_hit(0, MAN_PAGE), _hit(1, HTML_SOURCE)]
    for config in (ExtractConfig(margin=0.0), ExtractConfig(margin=0.05)):
        span = Extractor(encoder, config).extract([Question(question)], hits).spans[0]
        assert span.source == 1 and "wc -w notes.txt" in span.text
        start = MAN_PAGE.index(span.text)
        starts, ends = _sentence_edges(MAN_PAGE)
        assert start in starts and start + len(span.text) in ends
        assert span.text.startswith("When the whole file")
    terms = by_terms(question, hits, max_sentences=1).spans[0].text
    assert terms.endswith("use this\n           wc -w notes.txt")
