"""The answering component: extractive answers chosen by meaning, one Answer streamed and returned, the
"not covered" decision fitted on real demo questions, and the LLM backend registry."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from service.ask import answer, answer_stream
from service.config import Settings
from service.demo import OUT_OF_SCOPE, QUERIES
from service.events import RetrievalEvent
from service.generation.abstention import FEATURES, AbstentionModel, Evidence, load_abstention, save_abstention
from service.generation.answer import NOT_COVERED_TEXT, Answer, Answerer, AnswerMode, Token
from service.generation.backends import LLMBackend, open_llm
from service.generation.extractive import ExtractConfig, Extractor, by_terms, grow_span
from service.pipeline import Pipeline
from service.queries import load_queries
from service.retrieval.passage import Passage, RankedHit
from service.retrieval.results import Question
from service.schemas import AskRequest, AskResponse
from service.text import sentence_bounds
from tests.conftest import make_settings
from training.abstention import CHEAP_FEATURES, NEAREST_OUT, SOURCED, ask_known, choose_features, collect_evidence, fit, measure, question_evidence


def _hit(i: int, text: str) -> RankedHit:
    return RankedHit(Passage(f"d/p#{i:03d}", "d", "Guide > Section", "d/p.md", text), 0.5, 0.9, 0.45)


def test_the_api_reports_the_answer_mode_as_its_value():
    fields: dict[str, typing.Any] = {"query": "q", "answer": None, "citations": [], "sources": [], "timings_ms": {}, "versions": {}}
    routing: dict[str, typing.Any] = {
        "probabilities": {},
        "threshold": 0.0,
        "active_domains": [],
        "activation": {},
        "fallback": False,
        "mode": "deterministic",
        "router": "uniform",
    }
    for mode in AnswerMode:
        resp = AskResponse.model_validate({**fields, "answer_mode": mode, "routing": routing, "strategy": "fused"})
        assert resp.answer_mode == mode.value and resp.model_dump()["answer_mode"] == mode.value == str(mode)
    with pytest.raises(ValueError):
        AskResponse.model_validate({**fields, "answer_mode": "guessed", "routing": routing, "strategy": "fused"})


def test_sentence_bounds_are_offsets_into_the_passage():
    text = "First one. Second one!\n- a list item\n\nLast (one)."
    assert [text[a:b] for a, b in sentence_bounds(text)] == ["First one.", "Second one!", "- a list item", "Last (one)."]


def test_span_grows_around_the_best_sentence_within_margin_and_length():
    scores = np.array([0.1, 0.5, 0.9, 0.8, 0.2])
    assert grow_span(scores, [5] * 5, margin=0.45, max_words=100) == (1, 4)
    assert grow_span(scores, [5] * 5, margin=0.15, max_words=100) == (2, 4)
    assert grow_span(scores, [5] * 5, margin=1.0, max_words=10) == (2, 4)


def test_meaning_finds_the_answer_that_shares_no_word_with_the_question(encoder):
    hits = [
        _hit(0, "Invoices are emailed on the first day of each month. Every invoice lists the VAT number."),
        _hit(1, "Refunds reach the original card within five business days. Partial refunds are possible."),
    ]
    question = "How long until my money comes back?"
    extract = Extractor(encoder, ExtractConfig(margin=0.0)).extract([Question(question)], hits)
    assert extract.text == "Refunds reach the original card within five business days. [2]"
    # Shared words alone cannot tell: the earlier method quotes the first source.
    assert by_terms(question, hits, max_sentences=1).spans[0].source == 1


def test_extractive_answer_quotes_the_demo_passage_and_streams_the_same_answer(demo_pipeline):
    req = AskRequest(query="How do I import contacts from a spreadsheet?")
    resp = answer(demo_pipeline, req)
    assert resp.answer_mode == "extractive" and resp.error is None
    assert resp.citations and resp.answer is not None and "Import" in resp.answer
    cited = resp.sources[resp.citations[0] - 1]
    quoted = resp.answer.rsplit(" [", 1)[0]
    assert quoted in cited.text and cited.doc_id.startswith("orbit/import-export")
    assert resp.confidence is not None and resp.confidence.evidence["span_score"] > 0.5
    events = list(answer_stream(demo_pipeline, req))
    assert [e.name for e in events] == ["retrieval", "token", "done"]
    assert events[1].data()["text"] == events[-1].data()["answer"] == resp.answer
    assert isinstance(events[0], RetrievalEvent)
    assert [s.doc_id for s in events[0].sources] == [s.doc_id for s in resp.sources]


def test_stream_ends_with_the_answer_it_returns(demo_pipeline):
    ret = demo_pipeline.retrieve("How is the CSAT score calculated?", top_k=5, gate_mode="deterministic")
    items = list(demo_pipeline.answerer.stream(ret.query, ret.parts, ret.hits, ret.routing.probabilities))
    assert isinstance(items[-1], Answer) and all(isinstance(i, Token) for i in items[:-1])
    last = demo_pipeline.answerer.answer(ret.query, ret.parts, ret.hits, ret.routing.probabilities)
    assert last.text == items[-1].text == "".join(i.text for i in items[:-1])
    assert last.mode is AnswerMode.EXTRACTIVE and "answer" in last.timings_ms


def test_no_hits_and_ranking_only(demo_pipeline):
    answerer = demo_pipeline.answerer
    none = answerer.answer("anything", [Question("anything")], [], {"orbit": 0.9})
    assert none.mode is AnswerMode.NONE and none.text is None and none.error
    ranking = answerer.answer("anything", [Question("anything")], [_hit(0, "Text.")], {"orbit": 0.9}, generate=False)
    assert ranking.mode is AnswerMode.RETRIEVAL and ranking.text is None


@pytest.fixture(scope="module")
def demo_evidence(demo_pipeline) -> tuple[np.ndarray, np.ndarray]:
    """Evidence of half of the demo questions and of the shipped out-of-scope ones."""
    inq = [q.query for q in load_queries(QUERIES)]
    outq = [q.query for q in load_queries(OUT_OF_SCOPE)]
    return collect_evidence(demo_pipeline, inq[::4] + inq[1::4]), collect_evidence(demo_pipeline, outq)


@pytest.fixture(scope="module")
def demo_abstention(demo_evidence) -> tuple[AbstentionModel, dict]:
    """Fitted on half of the demo questions and half of the shipped out-of-scope ones; measured on the rest."""
    ev_in, ev_out = demo_evidence
    model = fit(ev_in[::2], ev_out[::2], false_refusal=0.05)
    return model, measure(model, ev_in[1::2], ev_out[1::2])


def test_span_score_is_kept_only_when_it_separates_more_questions(demo_evidence):
    ev_in, ev_out = demo_evidence
    span = FEATURES.index("span_score")
    only_span_in, only_span_out = ev_in.copy(), ev_out.copy()
    for rows in (only_span_in, only_span_out):  # every other feature made uninformative
        rows[:, [i for i in range(len(FEATURES)) if i != span]] = 0.5
    # constant columns of a sourced feature (no reranker here; rare_word made constant above) are no feature
    every, cheap = [f for f in FEATURES if f not in SOURCED], [f for f in CHEAP_FEATURES if f not in SOURCED]
    assert choose_features(only_span_in, only_span_out, false_refusal=0.05)["features"] == every
    no_span_in, no_span_out = ev_in.copy(), ev_out.copy()
    no_span_in[:, span] = no_span_out[:, span] = 0.5
    chosen = choose_features(no_span_in, no_span_out, false_refusal=0.05)
    rows = np.vstack([no_span_in, no_span_out])  # the demo's vocabulary makes rare_word a feature here
    cheap = [f for i, f in enumerate(FEATURES) if f in CHEAP_FEATURES and (f not in SOURCED or np.ptp(rows[:, i]) > 0)]
    assert "rare_word" in cheap and chosen["features"] == cheap and chosen["abstention_rate"] >= 0.8
    model = fit(no_span_in, no_span_out, false_refusal=0.05, features=cheap)
    assert model.features == cheap and len(model.coef) == len(cheap)


def test_abstention_fitted_on_real_questions_refuses_out_of_scope_ones(demo_abstention):
    model, heldout = demo_abstention
    assert heldout["abstention_rate"] >= 0.8 and heldout["false_refusal_rate"] <= 0.15, heldout
    assert 0.0 < model.threshold < 1.0 and model.target_false_refusal == 0.05


def test_not_covered_answer_lists_sources_and_the_confidence(demo_pipeline, demo_abstention, tmp_path):
    model = demo_abstention[0]
    save_abstention(model, tmp_path / "abstention.json")
    loaded = load_abstention(tmp_path / "abstention.json")
    assert loaded is not None and loaded.coef == model.coef
    pipeline = Pipeline(
        make_settings(demo_pipeline.settings.home_dir),
        router=demo_pipeline.router,
        encoder=demo_pipeline.encoder,
        store=demo_pipeline.store,
        abstention=loaded,
        vocabulary=demo_pipeline.answerer.vocabulary,  # the evidence it was fitted on reads the index's vocabulary
    )
    off = answer(pipeline, AskRequest(query="What is the meaning of life?"))
    assert off.answer_mode == "not_covered" and off.answer == NOT_COVERED_TEXT and off.citations == []
    assert len(off.sources) == 5
    assert off.confidence is not None and off.confidence.value is not None and off.confidence.threshold is not None
    assert not off.confidence.covered and off.confidence.value < off.confidence.threshold
    assert set(off.confidence.evidence) == set(FEATURES)
    on = answer(pipeline, AskRequest(query="How do I import contacts from a spreadsheet?"))
    assert on.confidence is not None and on.confidence.value is not None and on.confidence.threshold is not None
    assert on.answer_mode == "extractive" and on.confidence.covered and on.confidence.value >= on.confidence.threshold


def test_a_message_of_two_questions_is_fitted_with_the_nearest_out_it_is_served(demo_pipeline):
    inq, outq = load_queries(QUERIES)[:8], [q.query for q in load_queries(OUT_OF_SCOPE)][:8]
    message = f"{inq[0].query.rstrip('?')}? And, {outq[0].rstrip('?')}?"  # one in-scope question, one out of scope
    groups = [question_evidence(demo_pipeline, g) for g in ([q.query for q in inq[1:]], outq[1:], [message])]
    asked = ask_known(groups, inside=[0], outside=[1], domains=[[q.domains for q in inq[1:]]])
    assert groups[2].parts[0].shape[0] == 2  # retrieval split it in two
    fitted = float(groups[2].rows[0, NEAREST_OUT])
    answerer, before = demo_pipeline.answerer, demo_pipeline.answerer.asked
    answerer.asked = asked
    try:
        ret = demo_pipeline.retrieve(message, top_k=5, gate_mode="deterministic")
        served, _ = answerer.evidence(ret.parts, ret.hits, ret.routing.probabilities)
    finally:
        answerer.asked = before
    assert served.nearest_out == pytest.approx(fitted, abs=1e-4)
    assert abs(asked.nearest_out(groups[2].vectors) - fitted) > 1e-3  # not the whole message's value


def test_evidence_reads_router_similarity_and_span():
    ev = Evidence.of({"a": 0.2, "b": 0.7}, [_hit(0, "x"), RankedHit(_hit(1, "y").passage, 0.8, 1, 0.8)], 0.4)
    # not reranked, no vocabulary, no known questions: all four 0
    assert ev.vector() == [0.7, pytest.approx(0.9), 0.8, 0.4, 0.0, 0.0, 0.0, 0.0]
    rare = Evidence.of({"a": 0.2}, [_hit(0, "x")], 0.4, rare_word=0.5, uncovered=0.25)
    assert rare.vector(["uncovered", "rare_word", "max_prob"]) == [0.25, 0.5, 0.2]


def test_llm_backends_by_name(tmp_path):
    assert open_llm(Settings(home=tmp_path, llm_backend="auto", llm_base_url=None)) is None  # auto: extractive
    assert open_llm(Settings(home=tmp_path, llm_backend="none")) is None
    endpoint = open_llm(Settings(home=tmp_path, llm_backend="auto", llm_base_url="http://127.0.0.1:9/v1"))
    assert endpoint is not None and endpoint.name.startswith("openai:")
    assert {b.value for b in LLMBackend} == set(typing.get_args(Settings.model_fields["llm_backend"].annotation))


def test_answerer_without_an_llm_and_with_a_broken_one(demo_pipeline):
    ret = demo_pipeline.retrieve("How do refunds work?", top_k=3, gate_mode="deterministic")
    broken = Answerer(
        make_settings(demo_pipeline.settings.home_dir, answer_fallback="none"),
        demo_pipeline.encoder,
        llm_error="LLM backend could not start: no model",
    )
    out = broken.answer(ret.query, ret.parts, ret.hits, ret.routing.probabilities)
    assert out.mode is AnswerMode.NONE and out.text is None and out.error is not None and "could not start" in out.error


def test_a_pipeline_copy_with_other_settings_answers_with_them_and_leaves_the_shared_pipeline_as_it_is(demo_pipeline):
    from tests.utils import pipeline_with

    before = demo_pipeline.answerer.settings
    clone = pipeline_with(demo_pipeline, settings=before.model_copy(update={"answer_fallback": "none"}))
    assert clone.answerer is not demo_pipeline.answerer
    assert clone.answerer.settings.answer_fallback == "none" and clone.answerer._fallback_mode() == AnswerMode.NONE
    assert demo_pipeline.answerer.settings is before and demo_pipeline.answerer._fallback_mode() == AnswerMode.EXTRACTIVE
    assert demo_pipeline.settings is before and clone.settings.answer_fallback == "none"
    from service.generation.openai_llm import OpenAILLM

    llm = OpenAILLM("http://127.0.0.1:9", "nothing-listens")
    with_llm = demo_pipeline.with_llm(llm)
    assert with_llm.llm is llm and with_llm.versions["llm"] == llm.name and demo_pipeline.llm is None
    with_llm.close()  # a copy releases nothing: the shared pipeline still searches
    assert demo_pipeline.retrieve("How do refunds work?", top_k=1).hits
