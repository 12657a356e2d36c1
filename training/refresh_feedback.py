"""The feedback a refresh fits on: what the home's stored feedback establishes (:func:`service.feedback.review.labels`,
at ``FEDQA_FEEDBACK_MIN_KEYS`` agreeing keys), checked against the index the refresh starts from and added to the
labelled questions (``--queries``) and the out-of-scope ones (``--out-of-scope``) of every fit.

A question feedback labels is left out when none of its gold passages is in the index (the index was rebuilt since
the votes), or when the input files already hold it (the files' label is kept). What is left is fingerprinted with
the input files, so a refresh after new confirmations fits again the stages that read questions, and skips them when
the feedback is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from service.config import Settings
from service.queries import LabelledQuery


@dataclass(frozen=True)
class RefreshFeedback:
    """The feedback questions a refresh adds, and those it left out (counted)."""

    queries: list[LabelledQuery] = field(default_factory=list)  # with gold passages of the index
    out_of_scope: list[LabelledQuery] = field(default_factory=list)
    min_keys: int | None = None  # None: the feedback was not read (--no-feedback)
    not_in_index: int = 0  # labelled by feedback, but none of its passages is in the index
    in_files: int = 0  # already among the input files' questions

    @property
    def read(self) -> bool:
        """Whether the refresh read the feedback (not ``--no-feedback``)."""
        return self.min_keys is not None

    @property
    def empty(self) -> bool:
        """Whether it adds no question."""
        return not (self.queries or self.out_of_scope)

    def fingerprint(self) -> str:
        """A hash of the questions it adds (their text and labels)."""
        rows = [[q.qid, q.query, q.domains, q.gold_doc_ids] for q in [*self.queries, *self.out_of_scope]]
        return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()

    def counts(self) -> dict[str, Any]:
        """What versions and ``refresh.json`` record of it."""
        return {
            "read": self.read,
            "queries": len(self.queries),
            "out_of_scope": len(self.out_of_scope),
            "not_in_index": self.not_in_index,
            "in_files": self.in_files,
            "min_keys": self.min_keys,
        }

    def says(self) -> str:
        """The summary's line."""
        if not self.read:
            return "feedback: not read (--no-feedback)"
        left = [f"{n} {why}" for n, why in ((self.not_in_index, "with no passage in the index"), (self.in_files, "already in the files")) if n]
        return (
            f"feedback: {len(self.queries)} labelled question(s), {len(self.out_of_scope)} out-of-scope question(s)"
            f" (trusted, or {self.min_keys} keys agreeing)" + (f"; left out: {', '.join(left)}" if left else "")
        )


def read_feedback(settings: Settings, index_products: Callable[[], Mapping[str, str]], in_files: Collection[str]) -> RefreshFeedback:
    """The questions the home's stored feedback establishes, their gold passages kept when ``index_products()``
    (doc_id -> product, called only when feedback labels a passage) holds them, each question's products those of
    its passages there; questions whose normalised text is in ``in_files`` are left out."""
    from service.feedback.review import labels
    from service.feedback.store import FeedbackBounds, FeedbackStore, normalise

    found = labels(FeedbackStore(settings.feedback_path).votes(FeedbackBounds.of(settings)), settings.feedback_min_keys)
    products = index_products() if found.queries else {}
    queries, not_in_index = [], 0
    for q in found.queries:
        gold = [g for g in q.gold_doc_ids if g in products]
        if not gold:
            not_in_index += 1
            continue
        queries.append(replace(q, domains=sorted({products[g] for g in gold}), gold_doc_ids=gold))
    new = [q for q in queries if normalise(q.query) not in in_files]
    oos = [q for q in found.out_of_scope if normalise(q.query) not in in_files]
    repeated = len(queries) - len(new) + len(found.out_of_scope) - len(oos)
    return RefreshFeedback(new, oos, settings.feedback_min_keys, not_in_index, repeated)
