"""What a refresh adds from the home's feedback (training/refresh_feedback.py): checked against the index's passages,
without the questions the input files hold, fingerprinted."""

from __future__ import annotations

from pathlib import Path

from service.feedback.review import confirmation
from service.feedback.store import FeedbackBounds, FeedbackStore, Rating, Vote
from tests.utils import make_settings
from training.refresh_feedback import RefreshFeedback, read_feedback

INDEX = {"billing/refunds#000": "billing", "api/keys#001": "api"}


def _confirm(settings, query: str, passages: dict[str, str] | None = None, *, curator: str = "cli:ann") -> None:  # noqa: ANN001
    votes = confirmation(query, passages or {}, not_covered=not passages, curator=curator, key_products=None, index_version=None)
    FeedbackStore(settings.feedback_path).confirm(votes, FeedbackBounds.of(settings))


def test_confirmed_passages_of_the_index_and_not_covered_questions_are_added_with_the_index_products(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, feedback_min_keys=2)
    _confirm(settings, "How do I get my money back?", {"billing/refunds#000": "payments"})  # the product as rated then
    _confirm(settings, "Which port does the preview use?", {"site/preview#007": "site"})  # the index was rebuilt since
    _confirm(settings, "Can I pay in bitcoin?")
    _confirm(settings, "How do I rotate a key?", {"api/keys#001": "api"})  # the input files label it already
    ordinary = Vote(query="Do you sell gift cards?", key_name="k1", key_products=None, trusted=False, index_version=None, not_covered=True)
    FeedbackStore(settings.feedback_path).record(ordinary, FeedbackBounds.of(settings))  # one ordinary key of the 2 needed

    found = read_feedback(settings, lambda: INDEX, {"how do i rotate a key"})
    assert [(q.query, q.domains, q.gold_doc_ids, q.kind) for q in found.queries] == [
        ("How do I get my money back?", ["billing"], ["billing/refunds#000"], "feedback")
    ]
    assert [q.query for q in found.out_of_scope] == ["Can I pay in bitcoin?"]
    assert (found.not_in_index, found.in_files, found.min_keys) == (1, 1, 2)
    assert "left out: 1 with no passage in the index, 1 already in the files" in found.says()

    FeedbackStore(settings.feedback_path).record(
        Vote(query="do you sell gift cards", key_name="k2", key_products=None, trusted=False, index_version=None, rating=None, not_covered=True),
        FeedbackBounds.of(settings),
    )
    again = read_feedback(settings, lambda: INDEX, {"how do i rotate a key"})
    assert len(again.out_of_scope) == 2 and again.fingerprint() != found.fingerprint()  # a second key agreed: the refresh fits again
    assert read_feedback(settings, lambda: INDEX, {"how do i rotate a key"}).fingerprint() == again.fingerprint()


def test_without_a_confirmed_passage_the_index_is_not_read(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    _confirm(settings, "Can I pay in bitcoin?")
    FeedbackStore(settings.feedback_path).record(
        Vote(
            query="How do I get my money back?",
            key_name="k1",
            key_products=None,
            trusted=False,
            index_version=None,
            rating=Rating.UP,
            doc_id="billing/refunds#000",
        ),
        FeedbackBounds.of(settings),
    )

    def index() -> dict[str, str]:
        raise AssertionError("the index was opened for feedback without a passage to check")

    found = read_feedback(settings, index, set())
    assert not found.queries and len(found.out_of_scope) == 1 and found.read


def test_not_read_says_so_and_adds_nothing() -> None:
    skipped = RefreshFeedback()
    assert not skipped.read and skipped.empty and skipped.counts()["read"] is False
    assert skipped.says() == "feedback: not read (--no-feedback)"
