"""Stored feedback read per question: the curators' review queue (``fedqa feedback list``, ``GET /admin/feedback``)
and the labelled questions it yields (``fedqa feedback export``).

A question's feedback counts distinct keys (a key's repeated votes are one row of the store). A passage becomes a
gold passage of the question when a trusted key (curator or admin) rated it "up", or when at least ``min_keys``
distinct keys did and more of them rated it up than down, unless a trusted key rated it "down". A question without
gold passages is out of scope when a trusted key marked it "not covered", or ``min_keys`` distinct keys did, unless a
trusted key said the documentation does cover it (a "down" with no passage).

Each question has an id (``feedback-`` and a hash of the normalised question): the queue shows it, ``fedqa feedback
confirm --id`` and ``POST /admin/feedback/confirm`` take it, and the export uses it as the question's ``qid``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, Field

from service.feedback.store import Rating, StoredVote, Vote
from service.queries import LabelledQuery
from service.scope import visible


class PassageVotes(BaseModel):
    """What the keys said about one passage for one question."""

    doc_id: str = Field(description="The passage rated.")
    domain: str | None = Field(description="The passage's product (in the index version it was rated on).")
    up_keys: int = Field(description="Distinct keys that rated it up (it answered the question).")
    down_keys: int = Field(description="Distinct keys that rated it down (it did not).")
    trusted_up: bool = Field(description="A curator or admin key rated it up.")
    trusted_down: bool = Field(description="A curator or admin key rated it down.")


class QueueItem(BaseModel):
    """One question of the review queue with its feedback, counted in distinct keys."""

    id: str = Field(description="The question's id (for 'fedqa feedback confirm --id'; the export's qid).")
    query: str = Field(description="The question as last sent.")
    keys: int = Field(description="Distinct keys that sent feedback on it.")
    down_keys: int = Field(description="Distinct keys that rated a passage down.")
    not_covered_keys: int = Field(description="Distinct keys that marked it not covered by the documentation.")
    covered_keys: int = Field(
        description='Distinct keys that said the documentation does cover it: a "down" with no passage (a "not covered" answer rated wrong).'
    )
    up_keys: int = Field(description="Distinct keys that rated a passage up.")
    confirmed: bool = Field(description="A trusted key (curator or admin) rated a passage up or marked it not covered.")
    confirmed_doc_ids: list[str] = Field(description="Passages a trusted key rated up.")
    not_covered_confirmed: bool = Field(description="A trusted key marked it not covered.")
    passages: list[PassageVotes] = Field(description="The passages rated for it.")
    comments: list[str] = Field(description="The latest comments (at most 5).")
    last: float = Field(description="When feedback on it was last sent (epoch s).")


@dataclass
class _Question:
    """The stored rows of one normalised question."""

    norm: str
    rows: list[StoredVote] = field(default_factory=list)

    def keys(
        self, *, trusted: bool | None = None, rating: str | None = None, doc_id: str | None = None, not_covered: bool = False, covered: bool = False
    ) -> set[str]:
        """The distinct keys whose rows match (None: any; ``covered``: only "down" votes on no passage)."""
        return {
            r.vote.key_name
            for r in self.rows
            if (trusted is None or r.vote.trusted == trusted)
            and (rating is None or r.vote.rating == rating)
            and (doc_id is None or r.vote.doc_id == doc_id)
            and (not not_covered or r.vote.not_covered)
            and (not covered or (r.vote.rating == "down" and not r.vote.doc_id))
        }

    def scope(self) -> list[str] | None:
        """The products the question's feedback touches: its passages' and its voters' (None: every product)."""
        products = {r.vote.domain for r in self.rows if r.vote.domain}
        for r in self.rows:
            if r.vote.key_products is None:
                return None
            products.update(r.vote.key_products)
        return sorted(products)

    def seen_by(self, trusted: set[str], agreeing: set[str]) -> tuple[str, ...] | None:
        """Where what keys established counts (:class:`FeedbackLabels`, ``scopes``; None: every product): each
        ``trusted`` key's verdict within the products it sees (together: all they see), else what ``agreeing`` keys
        established within the products every one of them sees."""
        keys = trusted or agreeing
        scopes = {r.vote.key_name: r.vote.key_products for r in self.rows if r.vote.key_name in keys}
        if trusted:
            seen = [frozenset(p) for p in scopes.values() if p is not None]
            return None if len(seen) < len(scopes) else tuple(sorted(frozenset().union(*seen)))
        limited = [frozenset(p) for p in scopes.values() if p is not None]
        return tuple(sorted(frozenset.intersection(*limited))) if limited else None

    def passages(self) -> list[PassageVotes]:
        doc_ids = dict.fromkeys(r.vote.doc_id for r in self.rows if r.vote.doc_id and r.vote.rating)
        domains = {r.vote.doc_id: r.vote.domain for r in self.rows}  # the latest row's
        return [
            PassageVotes(
                doc_id=d,
                domain=domains.get(d),
                up_keys=len(self.keys(rating="up", doc_id=d)),
                down_keys=len(self.keys(rating="down", doc_id=d)),
                trusted_up=bool(self.keys(trusted=True, rating="up", doc_id=d)),
                trusted_down=bool(self.keys(trusted=True, rating="down", doc_id=d)),
            )
            for d in doc_ids
        ]

    def item(self) -> QueueItem:
        passages = self.passages()
        confirmed_docs = [p.doc_id for p in passages if p.trusted_up]
        nc_confirmed = bool(self.keys(trusted=True, not_covered=True))
        comments = [r.vote.comment for r in reversed(self.rows) if r.vote.comment]
        return QueueItem(
            id=question_id(self.norm),
            query=self.rows[-1].vote.query,
            keys=len(self.keys()),
            down_keys=len(self.keys(rating="down")),
            not_covered_keys=len(self.keys(not_covered=True)),
            covered_keys=len(self.keys(covered=True)),
            up_keys=len(self.keys(rating="up")),
            confirmed=bool(confirmed_docs) or nc_confirmed,
            confirmed_doc_ids=confirmed_docs,
            not_covered_confirmed=nc_confirmed,
            passages=passages,
            comments=list(dict.fromkeys(comments))[:5],
            last=max(r.updated for r in self.rows),
        )


def _questions(votes: Sequence[StoredVote]) -> list[_Question]:
    """The rows grouped by normalised question, each group oldest first."""
    groups: dict[str, _Question] = {}
    for row in sorted(votes, key=lambda r: r.updated):
        groups.setdefault(row.vote.norm, _Question(row.vote.norm)).rows.append(row)
    return list(groups.values())


def review_queue(votes: Sequence[StoredVote], *, limit: int | None = None, allowed: frozenset[str] | None = None) -> list[QueueItem]:
    """The questions a curator should look at: rated down, marked not covered, or never confirmed by a trusted key;
    most distinct keys first, then the latest. ``allowed``: only questions whose feedback stays within these products."""
    items = []
    for q in _questions(votes):
        if not visible(q.scope(), allowed):
            continue
        item = q.item()
        if item.down_keys or item.not_covered_keys or not item.confirmed:
            items.append(item)
    items.sort(key=lambda i: (-i.keys, -i.last))
    return items[:limit] if limit is not None else items


@dataclass(frozen=True)
class FeedbackLabels:
    """What feedback establishes: questions with gold passages (``queries.jsonl`` format, for ``fedqa train router
    --queries``) and questions the documentation does not cover (for ``--out-of-scope``)."""

    queries: list[LabelledQuery]
    out_of_scope: list[LabelledQuery]
    # qid -> the products every key that established it sees (None: every product): where it counts at once
    scopes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)


def question_id(norm: str) -> str:
    """The id of a normalised question (:func:`~service.feedback.store.normalise`): the queue's and the export's."""
    return "feedback-" + hashlib.sha256(norm.encode()).hexdigest()[:12]


def question_of(votes: Sequence[StoredVote], qid: str) -> str | None:
    """The question (as last sent) whose id is ``qid`` among the stored rows (None: no such question)."""
    found = [r for r in votes if question_id(r.vote.norm) == qid]
    return max(found, key=lambda r: r.updated).vote.query if found else None


def labels(votes: Sequence[StoredVote], min_keys: int) -> FeedbackLabels:
    """The labelled and out-of-scope questions the feedback establishes (see the module doc for the rule)."""
    queries, out_of_scope = [], []
    scopes: dict[str, tuple[str, ...] | None] = {}
    for q in _questions(votes):
        text, qid = q.rows[-1].vote.query, question_id(q.norm)
        gold = [p for p in q.passages() if not p.trusted_down and (p.trusted_up or (p.up_keys >= min_keys and p.up_keys > p.down_keys)) and p.domain]
        if gold:
            domains = sorted({str(p.domain) for p in gold})
            queries.append(LabelledQuery(qid, text, domains, [p.doc_id for p in gold], kind="feedback"))
            trusted_up = set().union(*(q.keys(trusted=True, rating="up", doc_id=p.doc_id) for p in gold))
            scopes[qid] = q.seen_by(trusted_up, set().union(*(q.keys(rating="up", doc_id=p.doc_id) for p in gold)))
        elif (q.keys(trusted=True, not_covered=True) or len(q.keys(not_covered=True)) >= min_keys) and not q.keys(trusted=True, covered=True):
            out_of_scope.append(LabelledQuery(qid, text, [], [], kind="oos"))
            scopes[qid] = q.seen_by(q.keys(trusted=True, not_covered=True), q.keys(not_covered=True))
    return FeedbackLabels(queries, out_of_scope, scopes)


def write_queries(path: Path, queries: Sequence[LabelledQuery]) -> None:
    """Write questions in the ``queries.jsonl`` format (qid, query, domains, gold_doc_ids, kind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for q in queries:
            rec = {"qid": q.qid, "query": q.query, "domains": q.domains, "gold_doc_ids": q.gold_doc_ids, "kind": q.kind}
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def confirmation(
    query: str,
    passages: dict[str, str],
    *,
    not_covered: bool,
    curator: str,
    key_products: tuple[str, ...] | None,
    index_version: str | None,
    comment: str | None = None,
) -> list[Vote]:
    """A curator's verdict on ``query`` as trusted votes: "up" on each of ``passages`` (doc_id -> its product), or
    the question not covered (``not_covered``, and no passages). :meth:`FeedbackStore.confirm
    <service.feedback.store.FeedbackStore.confirm>` stores them in place of the curator's earlier word on it."""
    if bool(passages) == not_covered:
        raise ValueError("confirm either the passages that answer the question or that it is not covered, not both")
    verdict = Vote(query=query, key_name=curator, key_products=key_products, trusted=True, index_version=index_version, comment=comment)
    if not_covered:
        return [replace(verdict, not_covered=True)]
    return [replace(verdict, rating=Rating.UP, doc_id=doc, domain=domain) for doc, domain in passages.items()]
