"""Where a feedback verdict counts at once (:func:`service.feedback.review.labels`, ``scopes``): a trusted key's
within the products it sees (together, every trusted key's), agreeing ordinary keys' within the products every one of
them sees; a key of every product, everywhere."""

from __future__ import annotations

from pathlib import Path

from service.feedback.review import FeedbackLabels, labels, question_id
from service.feedback.store import FeedbackBounds, FeedbackStore, Rating, StoredVote, Vote, normalise
from tests.utils import make_settings


def _store(tmp_path: Path, votes: list[Vote]) -> list[StoredVote]:
    settings = make_settings(tmp_path)
    store = FeedbackStore(settings.feedback_path)
    for v in votes:
        store.record(v, FeedbackBounds.of(settings))
    return store.votes(FeedbackBounds.of(settings))


def _nc(query: str, key: str, products: tuple[str, ...] | None, *, trusted: bool = False) -> Vote:
    return Vote(query=query, key_name=key, key_products=products, trusted=trusted, index_version=None, not_covered=True)


def _scope(found: FeedbackLabels, query: str) -> tuple[str, ...] | None:
    return found.scopes[question_id(normalise(query))]


def test_a_verdict_counts_within_the_products_of_the_keys_that_gave_it(tmp_path: Path) -> None:
    q1, q2, q3 = "Is there a mobile app?", "Can I pay in bitcoin?", "How do I reset my password?"
    votes = _store(
        tmp_path,
        [
            _nc(q1, "orbit curator", ("orbit",), trusted=True),
            _nc(q1, "anyone", None),  # an ordinary key of every product: widens nothing
            _nc(q2, "orbit curator", ("orbit",), trusted=True),
            _nc(q2, "relay curator", ("relay",), trusted=True),
            _nc(q3, "a", ("orbit", "relay")),
            _nc(q3, "b", ("orbit",)),
            _nc(q3, "c", None),
        ],
    )
    found = labels(votes, min_keys=3)
    assert sorted(q.query for q in found.out_of_scope) == sorted([q1, q2, q3])
    assert _scope(found, q1) == ("orbit",)
    assert _scope(found, q2) == ("orbit", "relay")  # each curator's verdict within its products
    assert _scope(found, q3) == ("orbit",)  # three ordinary keys agreeing: what every one of them sees

    admin = labels(_store(tmp_path / "2", [_nc(q1, "orbit curator", ("orbit",), trusted=True), _nc(q1, "admin", None, trusted=True)]), 3)
    assert _scope(admin, q1) is None  # a trusted key of every product: every caller's


def test_a_confirmed_passage_counts_within_the_products_of_the_keys_that_confirmed_it(tmp_path: Path) -> None:
    up = Vote(
        query="How do I import contacts?",
        key_name="orbit curator",
        key_products=("orbit",),
        trusted=True,
        index_version=None,
        rating=Rating.UP,
        doc_id="orbit/import#000",
        domain="orbit",
    )
    found = labels(_store(tmp_path, [up]), min_keys=3)
    assert [q.gold_doc_ids for q in found.queries] == [["orbit/import#000"]] and _scope(found, up.query) == ("orbit",)
