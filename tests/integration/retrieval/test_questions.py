"""Messages asking several questions: split where a new sentence starts with a joining word, each question
routed and searched on its own by the default strategy, rankings interleaved."""

from __future__ import annotations

import pytest

from service.retrieval.passage import Passage, RankedHit
from service.retrieval.questions import interleave
from service.text import MAX_QUESTIONS, split_questions


def test_joined_questions_are_split_and_one_question_is_not():
    assert split_questions("How do I strip HTML from a string? And, how do I report a bug in Debian?") == [
        "How do I strip HTML from a string?",
        "how do I report a bug in Debian?",
    ]
    assert split_questions("Why does my WHERE clause return every row. Also how do I pickle objects") == [
        "Why does my WHERE clause return every row.",
        "how do I pickle objects",
    ]
    one = "I get compiler warnings when I compile SQLite. Isn't this a problem? Doesn't it indicate poor code quality?"
    assert split_questions(one) == [one]
    assert split_questions("How do I sort and filter a list?") == ["How do I sort and filter a list?"]  # no sentence ends before 'and'
    many = " And, ".join(f"Question {i}?" for i in range(MAX_QUESTIONS + 2))
    parts = split_questions(many)
    assert len(parts) == MAX_QUESTIONS and parts[-1].startswith(f"Question {MAX_QUESTIONS - 1}?")


def _hit(doc: str, u: float) -> RankedHit:
    return RankedHit(Passage(doc, doc[0], doc, doc, doc), u, 1.0, u)


def test_interleave_takes_each_questions_rank_before_the_next_rank_and_each_passage_once():
    a = [_hit("a1", 0.9), _hit("a2", 0.8), _hit("a3", 0.7)]
    b = [_hit("b1", 0.5), _hit("a1", 0.45), _hit("b3", 0.4)]
    assert [h.passage.doc_id for h in interleave([a, b], 10)] == ["a1", "b1", "a2", "a3", "b3"]
    assert [h.passage.doc_id for h in interleave([b, a], 3)] == ["a1", "b1", "a2"]
    assert interleave([[], []], 5) == []


def test_default_strategy_retrieves_each_question_of_a_message(demo_pipeline):
    first, second = "How do I import contacts from a spreadsheet?", "How do I rotate API keys?"
    message = f"{first} And, {second}"
    alone = [demo_pipeline.retrieve(q, top_k=5) for q in (first, second)]
    joint = demo_pipeline.retrieve(message, top_k=5)
    assert [h.passage.doc_id for h in joint.hits[:2]] == [  # by the key each ranking is ordered by (U, or a model's score)
        h.passage.doc_id for h in sorted((r.hits[0] for r in alone), key=lambda h: (-h.order_key, -h.score, h.passage.doc_id))
    ]
    assert joint.routing.selector is not None and joint.routing.selector.questions is not None
    assert [q.query for q in joint.routing.selector.questions] == [first, second]
    assert joint.routing.model_dump(mode="json")["selector"]["questions"][1]["query"] == second  # the response's JSON
    assert set(joint.routing.active_domains) == {d for r in alone for d in r.routing.active_domains}
    for d, p in joint.routing.probabilities.items():
        # a part encoded beside another differs from it encoded alone at float noise (the batch's padding)
        assert p == pytest.approx(max(r.routing.probabilities[d] for r in alone), abs=1e-5)
    # The paper's strategies search the message as one query; the default does too for a chat's joined turns.
    for kwargs in ({"strategy": "uis"}, {"question": message}):
        whole = demo_pipeline.retrieve(message, top_k=5, **kwargs)
        assert whole.routing.selector is None or whole.routing.selector.questions is None


def test_extractive_answer_quotes_an_answer_for_each_question(demo_pipeline):
    from service.ask import answer
    from service.retrieval.results import Question
    from service.schemas import AskRequest

    first, second = "How do I import contacts from a spreadsheet?", "How do I rotate API keys?"
    alone = [demo_pipeline.answerer.extractor.extract([Question(q)], demo_pipeline.retrieve(q, top_k=5).hits).spans[0].text for q in (first, second)]
    joint = answer(demo_pipeline, AskRequest(query=f"{first} And, {second}"))
    assert joint.answer_mode == "extractive"
    assert joint.answer is not None
    assert all(text in joint.answer for text in alone)  # each question's own quote
    assert len(set(joint.citations)) >= 2
    single = answer(demo_pipeline, AskRequest(query=first))
    assert alone[1] not in (single.answer or "")


def test_the_answer_quotes_for_the_questions_retrieval_split_with_every_strategy(demo_pipeline):
    """Retrieval splits the message once, with every strategy (``uis`` and the others search it whole); the answer
    quotes per question from ``Retrieval.parts``: one quote per question, the first for the first."""
    from service.retrieval.results import Question
    from service.retrieval.strategies import StrategyName

    first, second = "How do I import contacts from a spreadsheet?", "How do I rotate API keys?"
    message = f"{first} And, {second}"
    extractor = demo_pipeline.answerer.extractor
    for strategy in StrategyName:
        ret = demo_pipeline.retrieve(message, top_k=5, strategy=strategy, gate_mode="deterministic", seed=0)
        assert [p.text for p in ret.parts] == split_questions(message) == [first, second], strategy
        answer = demo_pipeline.answer_retrieval(ret)
        assert answer.text == extractor.extract(ret.parts, ret.hits).text, strategy
        whole = extractor.extract([Question(message)], ret.hits).text  # the message quoted as one question
        own = [extractor.extract([p], ret.hits).spans[0] for p in ret.parts]
        assert own[0].text in (answer.text or ""), strategy
        if own[0].source != own[1].source:  # a passage is quoted once, for the first question that quotes it
            assert own[1].text in (answer.text or "") and answer.text != whole, strategy


def test_a_chat_turn_searched_with_its_earlier_turns_is_answered_for_its_own_questions(demo_pipeline):
    first, second = "How do I import contacts from a spreadsheet?", "How do I rotate API keys?"
    turn = f"{first} And, {second}"
    ret = demo_pipeline.retrieve(f"I use Orbit. {turn}", top_k=5, question=turn)
    assert ret.query == f"I use Orbit. {turn}" and (ret.routing.selector is None or ret.routing.selector.questions is None)  # searched whole
    assert [p.text for p in ret.parts] == [first, second]
    one = demo_pipeline.retrieve(f"I use Orbit. {first}", top_k=5, question=first)
    assert [p.text for p in one.parts] == [first] and one.parts[0].vector is one.vector
