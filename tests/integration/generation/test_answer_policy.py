"""The fitted extractive-answer policy: which passage it quotes, how much of it, where the answer runs on,
and that the fit follows the reference answers (whole passages vs single sentences)."""

from __future__ import annotations

from service.generation.answer_policy import WHOLE, AnswerPolicy, load_policy, next_doc_id, save_policy
from service.generation.extractive import SentenceVectors, by_policy
from service.retrieval.passage import Passage, RankedHit
from service.text import sentence_bounds, terms
from training.answer_policy import Case, fit_policy, mean_f1

REFUNDS = (
    "Refunds reach the original card within five business days. Invoices are emailed on the first day "
    "of each month. The office dog is called Biscuit."
)


def _hit(doc_id: str, text: str, score: float) -> RankedHit:
    return RankedHit(Passage(doc_id, "d", "Guide > Section", "d/p.md", text), score, 1.0, score)


def _policy(**kw) -> AnswerPolicy:
    return AnswerPolicy(**{"sources": 3, "term_weight": 0.0, "margin": WHOLE, "continue_gap": None, **kw})


def test_next_doc_id_keeps_the_page_and_the_number_width():
    assert next_doc_id("python/faq/programming#007") == "python/faq/programming#008"
    assert next_doc_id("a/b#099") == "a/b#100"
    assert next_doc_id("a/b") is None and next_doc_id("a/b#intro") is None


def test_term_weight_prefers_the_passage_that_names_what_is_asked():
    hits = [
        _hit("d/p#000", "Billing happens monthly for every plan.", 0.62),
        _hit("d/p#005", "To export invoices as PDF open Billing and choose Export.", 0.60),
    ]
    q = terms("How do I export invoices to PDF?")
    passage_terms = [terms(h.passage.text) for h in hits]
    assert _policy().choose(q, hits, passage_terms) == 0  # by similarity alone
    assert _policy(term_weight=0.1).choose(q, hits, passage_terms) == 1
    assert _policy(term_weight=0.1, sources=1).choose(q, hits, passage_terms) == 0  # one candidate only


def test_the_answer_runs_on_into_the_next_ranked_passage_of_the_page():
    hits = [
        _hit("d/p#003", "First part.", 0.70),
        _hit("x/y#001", "Other page.", 0.69),
        _hit("d/p#004", "Second part.", 0.66),
        _hit("d/p#005", "Third part.", 0.50),
    ]
    assert _policy(continue_gap=0.05).continuation(hits, 0) == [2]  # #005 is too far below
    assert _policy(continue_gap=0.25).continuation(hits, 0) == [2, 3]
    assert _policy(continue_gap=None).continuation(hits, 0) == []
    extract = by_policy("q", None, hits, None, _policy(continue_gap=0.05), max_words=400)
    assert extract.text == "First part. [1] Second part. [3]"


def test_margin_quotes_the_best_sentence_or_the_whole_passage(encoder):
    hits = [_hit("d/p#000", REFUNDS, 0.5)]
    question = "How long until my money comes back?"
    vector = encoder.embed_queries([question])[0]
    vectors = SentenceVectors(encoder)
    short = by_policy(question, vector, hits, vectors, _policy(margin=0.05), max_words=400)
    assert short.text == "Refunds reach the original card within five business days. [1]"
    whole = by_policy(question, vector, hits, vectors, _policy(), max_words=400)
    assert whole.text == f"{REFUNDS} [1]" and whole.score == short.score > 0.3
    assert by_policy(question, None, hits, None, _policy(), max_words=400).score == 0.0  # no sentence embedded


def test_fit_follows_the_length_of_the_reference_answers(encoder):
    questions = ["How long until my money comes back?", "When do invoices arrive?", "What is the dog's name?"]
    sentences = REFUNDS.split(". ")
    vectors = SentenceVectors(encoder)
    qv = encoder.embed_queries(questions)
    hits = [_hit("d/p#000", REFUNDS, 0.5)]
    to_sentences = [Case(q, v, hits, s) for q, v, s in zip(questions, qv, sentences, strict=True)]
    to_passages = [Case(q, v, hits, REFUNDS) for q, v in zip(questions, qv, strict=True)]
    short, whole = fit_policy(to_sentences, vectors), fit_policy(to_passages, vectors)
    assert short.margin < WHOLE and whole.margin == WHOLE
    assert mean_f1(short, to_sentences, vectors, 400) > mean_f1(whole, to_sentences, vectors, 400)


def test_policy_round_trip(tmp_path):
    policy = _policy(term_weight=0.2, continue_gap=0.05, fit={"on_fit_questions": {"answer_f1": 0.6}})
    save_policy(policy, tmp_path / "answer.json")
    loaded = load_policy(tmp_path / "answer.json")
    assert loaded is not None and loaded.to_json() == policy.to_json() and loaded.name.endswith("/answer.json")
    assert load_policy(tmp_path / "missing.json") is None


def test_demo_home_answers_with_its_fitted_policy(demo_pipeline):
    policy = demo_pipeline.answerer.extractor.policy
    assert policy is not None and policy.fit["on_fit_questions"]["questions"] > 100
    ret = demo_pipeline.retrieve("How do I import contacts from a spreadsheet?", top_k=5, gate_mode="deterministic")
    answer = demo_pipeline.answerer.answer(ret.query, ret.parts, ret.hits, ret.routing.probabilities)
    first = ret.hits[answer.citations[0] - 1].passage
    assert first.doc_id.startswith("orbit/import-export") and answer.text.split(" [")[0] in first.text


def test_whole_passage_policy_embeds_no_sentence_unless_the_abstention_reads_the_span(demo_pipeline, tmp_path):
    from service.generation.abstention import AbstentionModel
    from service.generation.answer import Answerer, AnswerMode
    from tests.conftest import make_settings

    ret = demo_pipeline.retrieve("How do I import contacts from a spreadsheet?", top_k=5, gate_mode="deterministic")
    settings = make_settings(tmp_path)

    def model(features: list[str]) -> AbstentionModel:  # a permissive model: only which features it reads matters
        n = len(features)
        return AbstentionModel(features, [0.0] * n, [1.0] * n, [0.0] * n, 0.0, threshold=0.0, target_false_refusal=0.0)

    for features, embeds in ((["max_prob", "p_sum", "best_similarity"], False), (["best_similarity", "span_score"], True)):
        vectors = SentenceVectors(demo_pipeline.encoder)
        answerer = Answerer(settings, demo_pipeline.encoder, abstention=model(features), vectors=vectors, policy=_policy())
        answer = answerer.answer(ret.query, ret.parts, ret.hits, ret.routing.probabilities)
        assert (
            answer.mode is AnswerMode.EXTRACTIVE
            and answer.text is not None
            and answer.text.startswith(ret.hits[answer.citations[0] - 1].passage.text.strip())
        )
        assert (len(vectors) > 0) is embeds
        assert answer.confidence is not None
        assert (answer.confidence.evidence["span_score"] > 0) is embeds


class _Counting:
    """The real encoder, counting the passage texts it embeds."""

    def __init__(self, encoder) -> None:  # noqa: ANN001
        self.encoder, self.embedded = encoder, 0

    def embed_passages(self, texts, batch_size: int = 64):  # noqa: ANN001, ANN201
        self.embedded += len(texts)
        return self.encoder.embed_passages(texts, batch_size=batch_size)


def test_sentence_vectors_are_computed_once_and_the_least_recently_read_passage_goes_first(encoder):
    counting = _Counting(encoder)
    vectors = SentenceVectors(counting, capacity=2)  # type: ignore[arg-type]
    a, b, c = (_hit(f"d/p#00{i}", REFUNDS, 0.5) for i in range(3))
    first = vectors.get([a, a, b])
    assert counting.embedded == 6 and len(vectors) == 2  # three sentences each; the repeated passage once
    assert first[0][1] is first[1][1] and first[0][0] == sentence_bounds(REFUNDS) and first[0][1].shape == (3, 384)
    vectors.get([a])  # a read: a is now the most recently used
    assert counting.embedded == 6
    vectors.get([c])  # over capacity: b (least recently read) goes, a stays
    assert counting.embedded == 9 and len(vectors) == 2
    vectors.get([a])
    assert counting.embedded == 9
    vectors.get([b])
    assert counting.embedded == 12
    vectors.clear()
    assert len(vectors) == 0
