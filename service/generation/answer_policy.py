"""How much the extractive answer quotes, and from which passage: a policy fitted on training questions.

The reference answers a deployment cares about decide how long a good answer is: a FAQ whose answers are
whole passages wants the passage quoted whole, a help centre with one-line answers wants the best sentences.
So the policy's few numbers are fitted (by :mod:`training.answer_policy`, ``fedqa train answer``) on labelled
questions with reference answers, and stored as ``answer.json`` beside the abstention model (the active router
version's folder, or the index version's without a router); it serves only when its verdict
(:class:`service.decisions.FitDecision` in ``fit.decision``) keeps it over the unfitted rule:

- ``sources``: how many top passages of the ranking are candidates;
- ``term_weight``: the candidate quoted is the one with the highest similarity s plus ``term_weight`` times
  the share of the question's content words it contains (a passage that names what is asked about);
- ``margin``: within it, the contiguous span of sentences within ``margin`` of its best sentence's score
  (``WHOLE`` = 2.0, the widest cosine margin: the whole passage, and no sentence needs embedding);
- ``continue_gap``: the passages that follow it on the same page (doc_id ``page#NNN`` then ``page#NNN+1``) and
  are in the ranking join the answer while their similarity is within ``continue_gap`` of its own (None: never).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from service.artifacts import Registry, load_fitted, read_stored, write_json_atomic
from service.decisions import decision_of
from service.retrieval.passage import RankedHit

ANSWER_POLICY_FILE = "answer.json"
WHOLE = 2.0  # cosine similarities differ by at most 2: every sentence is within this margin of the best


@dataclass
class AnswerPolicy:
    """The fitted extractive-answer policy (see the module docstring)."""

    sources: int
    term_weight: float
    margin: float
    continue_gap: float | None
    fit: dict[str, Any] = field(default_factory=dict)
    name: Annotated[str, Field(exclude=True)] = ANSWER_POLICY_FILE  # the file it was read from: not stored

    @property
    def serves(self) -> bool:
        """Whether the policy answers: its fit kept it over the unfitted rule (a policy stored before the verdicts
        existed serves)."""
        decision = decision_of(self.fit)
        return decision is None or decision.serves_fitted

    @property
    def whole(self) -> bool:
        """The chosen passage is quoted whole (no sentence scoring needed for the text)."""
        return self.margin >= WHOLE

    def choose(self, query_terms: AbstractSet[str], hits: Sequence[RankedHit], passage_terms: Sequence[AbstractSet[str]]) -> int:
        """Index (0-based) of the candidate to quote: similarity plus ``term_weight`` x share of query terms."""
        best, best_z = 0, float("-inf")
        for i, (h, t) in enumerate(zip(hits[: self.sources], passage_terms, strict=False)):
            z = h.score + self.term_weight * (len(query_terms & t) / max(1, len(query_terms)))
            if z > best_z:
                best, best_z = i, z
        return best

    def continuation(self, hits: Sequence[RankedHit], chosen: int) -> list[int]:
        """Indexes of the ranked passages that continue ``hits[chosen]`` on its page, in page order."""
        if self.continue_gap is None:
            return []
        by_id = {h.passage.doc_id: i for i, h in enumerate(hits)}
        floor = hits[chosen].score - self.continue_gap
        out: list[int] = []
        doc_id = hits[chosen].passage.doc_id
        while (nxt := next_doc_id(doc_id)) is not None and nxt in by_id and hits[by_id[nxt]].score >= floor:
            out.append(by_id[nxt])
            doc_id = nxt
        return out

    def to_json(self) -> dict[str, Any]:
        """The stored form (``answer.json``)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = ANSWER_POLICY_FILE) -> AnswerPolicy:
        """Read the stored form, named ``name``; ValueError naming it when a field is missing or of the wrong type."""
        return read_stored(_STORED, {**data, "name": name}, name)


_STORED = TypeAdapter(AnswerPolicy)


def next_doc_id(doc_id: str) -> str | None:
    """The id of the passage that follows ``doc_id`` on its page (``page#007`` -> ``page#008``), or None
    when the id has no passage number."""
    page, sep, number = doc_id.rpartition("#")
    if not sep or not number.isdigit():
        return None
    return f"{page}#{int(number) + 1:0{len(number)}d}"


def policy_path(registry: Registry, router_version: str | None, index_version: str | None) -> Path | None:
    """Where the policy for these versions lives: beside the abstention model."""
    from service.generation.abstention import abstention_path

    path = abstention_path(registry, router_version, index_version)
    return path.with_name(ANSWER_POLICY_FILE) if path is not None else None


def save_policy(policy: AnswerPolicy, path: Path) -> None:
    """Write the fitted policy atomically."""
    write_json_atomic(path, policy.to_json())


def load_policy(path: Path | None) -> AnswerPolicy | None:
    """The fitted policy at ``path``, or None when none was fitted."""
    return load_fitted(path, AnswerPolicy.from_json)
