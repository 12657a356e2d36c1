"""The extractive answer to a message asking several questions (service/generation/extractive.py): each question
quotes from its own ranking's passages, however few candidates the answer reads (the top passage here; a fitted
policy's ``sources`` 1 alike), and cites their places in the message's interleaved ranking
(service/retrieval/questions.py)."""

from __future__ import annotations

from service.generation.extractive import ExtractConfig, ExtractiveMethod, Extractor
from service.retrieval.passage import Passage, RankedHit
from service.retrieval.results import Question


def _hit(doc_id: str, score: float) -> RankedHit:
    return RankedHit(Passage(doc_id, doc_id[0], doc_id, doc_id, f"The text of {doc_id}."), score, 1.0, score)


def test_each_question_of_a_message_quotes_its_own_top_passage():
    # the message's ranking interleaves a#0 (first question's top), b#0 (second's), then a#1, b#1
    hits = [_hit("a#0", 0.9), _hit("b#0", 0.8), _hit("a#1", 0.7), _hit("b#1", 0.6)]
    parts = [Question("How do I import?", ranking=(("a", "a#0"), ("a", "a#1"))), Question("How do I rotate?", ranking=(("b", "b#0"), ("b", "b#1")))]
    one = Extractor(None, ExtractConfig(method=ExtractiveMethod.PASSAGE))  # one candidate: each question's top
    spans = one.extract(parts, hits).spans
    assert [(s.source, s.text) for s in spans] == [(1, "The text of a#0."), (2, "The text of b#0.")]  # not a#0 twice (quoted once)
    whole = [Question("How do I import?"), Question("How do I rotate?")]  # searched whole: both read the message's ranking
    assert [s.source for s in one.extract(whole, hits).spans] == [1]
    assert [s.source for s in one.extract(parts[1:], hits).spans] == [1]  # one question: the ranking as given
