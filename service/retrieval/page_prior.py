"""The page prior: where the labelled questions were answered, as a bonus to the unified score.

A documentation set answers most questions from a few pages (on faq6 the 221 dev questions are answered from 31
pages holding 721 of its 21,416 passages: the products' FAQs). The passages of a page that answered ``n`` of the
labelled training questions rank by

    U' = U + weight * log(1 + n)

(U = w_j * s+, the strategy's unified score; every other passage keeps U), over each searched domain's top ``depth``
hits. A passage that answers a counted question (a "known answer": on faq6 each FAQ answer answers one question, and
no two dev questions share a gold passage) answers a new question about as much as the new question resembles the
one it answers, so a known answer whose nearest counted question is at cosine c < ``match`` from the new one (their
query vectors) also loses ``penalty * (match - c)``; a question asked again keeps its answer's U. The counts come
from the labelled questions' gold passages (each question once per page), weight, depth, penalty and match are fitted
on held-out questions by ``fedqa train router`` (training/page_prior.py) and stored with the router version with the
questions counted and their vectors; weight and penalty 0 are the ranking without it. It applies to the default strategy and to a
product filter (the per-product answers), not to the baselines (uis, rfs, mkpqa, lfs), which rank as the method
defines them.

The pipeline serves the fitted prior with trusted feedback's labelled questions counted as well (:class:`KnownAnswers`,
:meth:`PagePrior.with_known`): a passage a curator confirmed is a known answer of its question from the moment it is
confirmed, until a refresh fits the prior on it.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

import numpy as np
from pydantic import PlainSerializer, PlainValidator, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from service.artifacts import read_stored
from service.retrieval.passage import point_id
from service.retrieval.unified import demotion, page_bonus


def _vector(stored: object) -> np.ndarray:
    """A question's vector from its stored form (little-endian float16, base64); ValueError when it is none."""
    if not isinstance(stored, str):
        raise ValueError(f"a question's vector is stored as base64 text, not {type(stored).__name__}")
    return np.frombuffer(base64.b64decode(stored, validate=True), dtype="<f2").astype(np.float32)


def _stored_vector(vector: np.ndarray) -> str:
    """A question's vector as stored: float16, little-endian, base64."""
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode("ascii")


StoredVector = Annotated[np.ndarray, PlainValidator(_vector), PlainSerializer(_stored_vector, return_type=str)]


@dataclass(frozen=True)
class PagePrior:
    """Fitted weight and depth; the labelled questions counted (their gold doc_ids) and the passages of their pages."""

    weight: float
    depth: int
    members: Mapping[str, Sequence[str]]  # page (a passage's ``source``) -> doc_ids of its passages in the index
    answers: Mapping[str, Sequence[str]]  # qid -> gold doc_ids of each labelled question counted
    penalty: float = 0.0  # a known answer's U lowered by penalty * (match - c) ...
    match: float = 1.0  # ... when its nearest counted question is at cosine c < match from the question
    questions: Mapping[str, StoredVector] = field(default_factory=dict, compare=False)  # qid -> its query vector (unit)
    page_of: Mapping[str, str] = field(init=False, repr=False, compare=False)  # doc_id -> its page, for the members
    pages: Mapping[str, int] = field(init=False, repr=False, compare=False)  # page -> questions counted there
    bonus: Mapping[str, float] = field(init=False, repr=False, compare=False)  # point id -> weight * log(1 + n)
    counts: Mapping[str, float] = field(init=False, repr=False, compare=False)  # point id -> log(1 + n), at any weight
    known: tuple[str, ...] = field(init=False, repr=False, compare=False)  # point ids of the known answers
    _askers: tuple[np.ndarray, np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.weight < 0 or self.depth < 1 or self.penalty < 0:
            raise ValueError(f"a page prior needs weight, penalty >= 0 and depth >= 1 (got {self.weight}, {self.penalty}, {self.depth})")
        page_of = {d: page for page, ids in self.members.items() for d in ids}
        pages: dict[str, int] = {}
        for gold in self.answers.values():
            for page in {page_of[d] for d in gold if d in page_of}:
                pages[page] = pages.get(page, 0) + 1
        counts = {point_id(d): math.log1p(n) for page, n in pages.items() for d in self.members[page]}
        bonus = prior_bonus(counts, {}, self.weight).total
        object.__setattr__(self, "page_of", page_of)
        object.__setattr__(self, "pages", pages)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "bonus", bonus)
        self._known_answers()

    def _known_answers(self) -> None:
        """``known`` and, for :meth:`nearest`, the counted questions' vectors and which of them each known answer has."""
        order = [q for q in self.answers if q in self.questions]
        row = {q: i for i, q in enumerate(order)}
        askers: dict[str, list[int]] = {}
        for q in order:
            for d in self.answers[q]:
                askers.setdefault(point_id(d), []).append(row[q])
        known = tuple(askers)
        dim = len(next(iter(self.questions.values()))) if self.questions else 0
        matrix = np.stack([_unit(self.questions[q]) for q in order]) if order else np.zeros((0, dim), dtype=np.float32)
        rows = np.array([i for p in known for i in askers[p]], dtype=np.int64)
        starts = np.cumsum([0] + [len(askers[p]) for p in known[:-1]]).astype(np.int64) if known else np.zeros(0, dtype=np.int64)
        object.__setattr__(self, "known", known)
        object.__setattr__(self, "_askers", (matrix, rows, starts))

    @property
    def demotes(self) -> bool:
        """Whether known answers lose U (a penalty above 0 and counted questions' vectors)."""
        return self.penalty > 0 and bool(self.known)

    @property
    def active(self) -> bool:
        """Whether it changes any ranking (a page bonus above 0, or known answers demoted)."""
        return bool(self.bonus) or self.demotes

    def nearest(self, vector: np.ndarray) -> np.ndarray:
        """Per known answer (``known``'s order), the cosine of ``vector`` to the nearest counted question it answers."""
        matrix, rows, starts = self._askers
        if not len(rows):
            return np.zeros(0, dtype=np.float32)
        return np.maximum.reduceat((matrix @ _unit(vector))[rows], starts)

    def bonus_for(self, vector: np.ndarray) -> PriorBonus:
        """What U gains (or loses) per point id for the question with query vector ``vector``, with its terms."""
        if not self.demotes:
            return PriorBonus(self.bonus, self.bonus)
        nearest = dict(zip(self.known, self.nearest(vector).tolist(), strict=True))
        return prior_bonus(self.counts, nearest, self.weight, self.penalty, self.match, self.bonus)

    def with_known(self, known: KnownAnswers) -> PagePrior:
        """The same prior (fitted weight, depth, penalty and match) also counting ``known``'s questions; a question it
        counts already keeps its own passages. Their pages add to the page counts where the page is one of ``members``
        (a page no counted question was answered from gets its count at the next fit)."""
        if not known.answers:
            return self
        answers = {**{q: list(ids) for q, ids in known.answers.items()}, **self.answers}
        return replace(self, answers=answers, questions={**known.questions, **self.questions})

    def without(self, gold_doc_ids: Iterable[str]) -> PagePrior:
        """The same prior without every counted question that shares a gold passage with ``gold_doc_ids`` (to score
        those questions as if they had not been counted: a joined question and its parts share their passages)."""
        gone = set(gold_doc_ids)
        return replace(self, answers={q: ids for q, ids in self.answers.items() if gone.isdisjoint(ids)})

    @model_serializer(mode="wrap")
    def _with_pages(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The stored form carries ``pages`` for its readers (recounted from ``answers`` when read)."""
        return {**handler(self), "pages": dict(self.pages)}

    def to_json(self) -> dict[str, Any]:
        """The stored form (``fitted.page_prior`` in ``router.json``; the question vectors as float16)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = "stored page prior") -> PagePrior:
        """Read the stored form (a prior of an older release: no penalty, match or questions); ValueError naming
        ``name`` when a field is missing or invalid."""
        return read_stored(_STORED, data, name)


_STORED = TypeAdapter(PagePrior)


@dataclass(frozen=True)
class KnownAnswers:
    """Questions counted beside the fitted ones (trusted feedback's, :func:`service.feedback.review.labels`): per qid
    its confirmed doc_ids in the index, its text and its query vector (unit) from the served encoder."""

    answers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)
    questions: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)


class PriorBonus(Mapping[str, float]):
    """The page prior's change to U for one question, by point id (a mapping: what the merge adds to U), with its
    terms: ``page`` the page bonus, ``nearest`` each known answer's cosine to the nearest counted question it answers
    (when known answers are demoted), ``demoted`` what a known answer lost."""

    def __init__(
        self,
        total: Mapping[str, float],
        page: Mapping[str, float],
        nearest: Mapping[str, float] | None = None,
        demoted: Mapping[str, float] | None = None,
    ) -> None:
        self.total = total
        self.page = page
        self.nearest: Mapping[str, float] = nearest or {}
        self.demoted: Mapping[str, float] = demoted or {}

    def __getitem__(self, key: str) -> float:
        return self.total[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.total)

    def __len__(self) -> int:
        return len(self.total)


def prior_bonus(
    counts: Mapping[str, float],
    nearest: Mapping[str, float],
    weight: float,
    penalty: float = 0.0,
    match: float = 1.0,
    page: Mapping[str, float] | None = None,
) -> PriorBonus:
    """The prior's change to U by point id at one setting: ``weight`` times each passage's ``counts`` (log(1 + n),
    :func:`~service.retrieval.unified.page_bonus`; none at weight 0), less each known answer's
    :func:`~service.retrieval.unified.demotion` whose ``nearest`` counted question is at cosine c < ``match`` (none at
    penalty 0). Served (:meth:`PagePrior.bonus_for`) and fitted (training/page_prior.py) alike. ``page``: the page
    bonus at ``weight``, when already made."""
    if page is None:
        pids = list(counts)
        page = dict(zip(pids, page_bonus(weight, [counts[p] for p in pids]).tolist(), strict=True)) if weight > 0 else {}
    far = [(pid, c) for pid, c in nearest.items() if c < match] if penalty > 0 else []
    if not far:
        return PriorBonus(page, page, nearest)
    lost = demotion(penalty, match, [c for _, c in far]).tolist()
    out, demoted = dict(page), {}
    for (pid, _), d in zip(far, lost, strict=True):
        demoted[pid] = d
        out[pid] = out.get(pid, 0.0) - d
    return PriorBonus(out, page, nearest, demoted)


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32).reshape(-1)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v
