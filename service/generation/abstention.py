"""Deciding that the documentation does not cover a question ("not covered").

The evidence for one question is a few numbers the answering path has anyway: the router's highest
probability and the sum of its probabilities (multi-label sigmoids: all low = no product; the sum also
counts a question spread over several products), the best similarity s of the ranking, the score of
the best sentence of the passage the extractive answer quotes, and (with a reranker) the best calibrated
reranker score: whether any passage, read together with the question, answers it; and how rare the question's rarest
word is in the documentation (:meth:`service.retrieval.vocabulary.Vocabulary.rarity`: 1 when no passage holds it, the
mark of a question about something the documentation never names), and how much of the question the passages placed
first leave unsaid (:meth:`~service.retrieval.vocabulary.Vocabulary.uncovered`: the specific words of a question
about another product are missing from the passage found on its topic), and how much nearer the question is to a
question known to be out of scope than to one known to be in scope (``nearest_out``,
:class:`~service.generation.asked.AskedQuestions`: the questions the model was fitted on, and those trusted feedback
marked since, which is how a curator's "not covered" verdict refuses the questions near it at once). A logistic model over them (fitted by
:mod:`training.abstention` on in-scope and out-of-scope questions) gives the confidence that the
documentation covers the question; below the fitted threshold the answer is ``not_covered``.
The fitted model is a JSON file stored with the router version it was fitted for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PlainSerializer, PlainValidator, TypeAdapter
from scipy.special import expit

from service.artifacts import Registry, load_fitted, read_stored, write_json_atomic
from service.generation.asked import AskedQuestions
from service.retrieval.passage import RankedHit

ABSTENTION_FILE = "abstention.json"
FEATURES = ("max_prob", "p_sum", "best_similarity", "span_score", "rerank_best", "rare_word", "uncovered", "nearest_out")
#: How the vocabulary's features are counted today (everyday words no passage holds left out:
#: :meth:`service.retrieval.vocabulary.Vocabulary.question_words`). A model stored before (no form) reads those
#: features shifted from what it was fitted on: it still serves, with a warning to refit it.
EVIDENCE_FORM = "everyday-words"
VOCABULARY_FEATURES = ("rare_word", "uncovered")


def _asked(stored: object) -> AskedQuestions | None:
    return None if stored is None else AskedQuestions.from_json(stored)


def _stored_asked(asked: AskedQuestions | None) -> dict[str, Any] | None:
    return None if asked is None else asked.to_json()


StoredAsked = Annotated[AskedQuestions | None, PlainValidator(_asked), PlainSerializer(_stored_asked)]


@dataclass(frozen=True)
class Evidence:
    """What the abstention decision reads for one question."""

    max_prob: float
    p_sum: float
    best_similarity: float
    span_score: float
    rerank_best: float = 0.0
    rare_word: float = 0.0
    uncovered: float = 0.0
    nearest_out: float = 0.0

    @classmethod
    def of(
        cls,
        probabilities: Mapping[str, float],
        hits: Sequence[RankedHit],
        span_score: float,
        rare_word: float = 0.0,
        uncovered: float = 0.0,
        nearest_out: float = 0.0,
    ) -> Evidence:
        """Evidence from the routing probabilities, the ranking (with the reranker's calibrated scores, 0 when it
        was not reranked), the extractive span's score, the question's rarest word and its share the first passages
        leave unsaid (both 0: no vocabulary), and how much nearer it is to a known out-of-scope question than to a known
        in-scope one (:class:`~service.generation.asked.AskedQuestions`; 0: none known)."""
        return cls(
            max_prob=max(probabilities.values(), default=0.0),
            p_sum=float(sum(probabilities.values())),
            best_similarity=max((h.score for h in hits), default=0.0),
            span_score=span_score,
            rerank_best=max((h.rerank_score for h in hits if h.rerank_score is not None), default=0.0),
            rare_word=rare_word,
            uncovered=uncovered,
            nearest_out=nearest_out,
        )

    def vector(self, names: Sequence[str] = FEATURES) -> list[float]:
        """The features in ``names`` order."""
        return [float(getattr(self, n)) for n in names]


@dataclass(frozen=True)
class Confidence:
    """The decision for one answer: P(covered), the threshold it was compared with, and its evidence."""

    covered: bool
    value: float | None
    threshold: float | None
    evidence: dict[str, float]
    model: str | None = None


@dataclass
class AbstentionModel:
    """Logistic confidence over standardised evidence, and the threshold fitted at a false-refusal rate."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    threshold: float
    target_false_refusal: float
    fit: dict[str, Any] = field(default_factory=dict)
    evidence_form: str = ""  # EVIDENCE_FORM when fitted; "" in a file stored before forms were recorded
    asked: StoredAsked = None  # the questions it was fitted on, nearest_out's reference (None: fitted before it was read)
    name: Annotated[str, Field(exclude=True)] = ABSTENTION_FILE  # the file it was read from: not stored

    @property
    def stale(self) -> bool:
        """Whether it reads a vocabulary feature counted otherwise when it was fitted (:data:`EVIDENCE_FORM`)."""
        return self.evidence_form != EVIDENCE_FORM and any(f in VOCABULARY_FEATURES for f in self.features)

    @property
    def unasked(self) -> bool:
        """Whether it was fitted before the questions it was fitted on were stored with it (``nearest_out`` reads 0 and
        feedback's "not covered" verdicts wait for it to be fitted again)."""
        return self.asked is None

    def confidence(self, evidence: Evidence) -> float:
        """P(the documentation covers the question) under the fitted model."""
        x = evidence.vector(self.features)
        z = self.intercept + sum(c * (v - m) / s for c, v, m, s in zip(self.coef, x, self.mean, self.scale, strict=True))
        return float(expit(max(-50.0, min(50.0, z))))  # z bounded as when math.exp needed it: fitted thresholds unchanged

    def decide(self, evidence: Evidence) -> Confidence:
        """Covered when the confidence reaches the threshold."""
        value = self.confidence(evidence)
        return Confidence(value >= self.threshold, round(value, 6), round(self.threshold, 6), _round(evidence), self.name)

    def to_json(self) -> dict[str, Any]:
        """The stored form (``abstention.json``)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = ABSTENTION_FILE) -> AbstentionModel:
        """Read the stored form, named ``name``; ValueError naming it when a field is missing or of the wrong type."""
        return read_stored(_STORED, {**data, "name": name}, name)


_STORED = TypeAdapter(AbstentionModel)


def undecided(evidence: Evidence) -> Confidence:
    """No fitted model: every question counts as covered; the evidence is still reported."""
    return Confidence(True, None, None, _round(evidence), None)


def _round(evidence: Evidence) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in asdict(evidence).items()}


def abstention_path(registry: Registry, router_version: str | None, index_version: str | None) -> Path | None:
    """Where the model for these versions lives: the router version's folder, or the index version's
    folder when no router is trained (the evidence then has no router signal)."""
    if router_version:
        return registry.path("router", router_version) / ABSTENTION_FILE
    if index_version:
        return registry.path("index", index_version) / ABSTENTION_FILE
    return None


def save_abstention(model: AbstentionModel, path: Path) -> None:
    """Write the fitted model atomically."""
    write_json_atomic(path, model.to_json())


def load_abstention(path: Path | None) -> AbstentionModel | None:
    """The fitted model at ``path``, or None when none was fitted."""
    return load_fitted(path, AbstentionModel.from_json)
