"""When an answer covers several products ("by product"): the split rule fitted with the router version.

The products are ranked by the router's calibrated p_j; the first always answers. A next one (up to ``max_groups``
in all) is a candidate when ``p_j >= min_ratio * p_1``; a candidate is searched on its own (the product filter)
and joins when its best passage scores within ``max_gap`` of the first product's best passage (the reranker's
calibrated score when the ranking was reranked, else the similarity s; None: no score test). Two or more products
left: the answer is given per product. The rule is fitted by :mod:`training.split` (``fedqa train split``) on the
router's validation questions and stored as ``split.json`` in the router version's folder; without the file every
answer is for one product, as before the rule existed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from service.artifacts import Registry, load_fitted, read_stored, write_json_atomic
from service.retrieval.passage import RankedHit

SPLIT_FILE = "split.json"
MAX_GROUPS = 3  # the "two or three plausible products": a choice, not a fitted value


@dataclass
class SplitRule:
    """The fitted rule (see the module docstring); ``fit``: what it was fitted on and its figures there."""

    min_ratio: float | None  # None: never split (what the fit keeps when no rule meets its bounds better)
    max_gap: float | None
    max_groups: int = MAX_GROUPS
    fit: dict[str, Any] = field(default_factory=dict)
    name: Annotated[str, Field(exclude=True)] = SPLIT_FILE  # the file it was read from: not stored

    def candidates(self, probabilities: Mapping[str, float]) -> list[str]:
        """The products that may answer, best p_j first: the first always, then those within ``min_ratio`` of it."""
        ranked = sorted(probabilities, key=lambda d: (-probabilities[d], d))[: self.max_groups]
        if not ranked:
            return []
        top = probabilities[ranked[0]]
        ratio = self.min_ratio
        return [ranked[0]] + [d for d in ranked[1:] if ratio is not None and top > 0 and probabilities[d] >= ratio * top]

    def keep(self, candidates: Sequence[str], best: Mapping[str, float]) -> list[str]:
        """Of ``candidates`` (the first is the top product), those whose best passage scores within ``max_gap`` of
        the first's (``best``: each candidate's best score; a product with no passage is left out)."""
        if not candidates or candidates[0] not in best:
            return list(candidates[:1])
        floor = None if self.max_gap is None else best[candidates[0]] - self.max_gap
        return [candidates[0]] + [d for d in candidates[1:] if d in best and (floor is None or best[d] >= floor)]

    def to_json(self) -> dict[str, Any]:
        """The stored form (``split.json``)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = SPLIT_FILE) -> SplitRule:
        """Read the stored form, named ``name``; ValueError naming it when a field is missing or of the wrong type."""
        return read_stored(_STORED, {**data, "name": name}, name)


_STORED = TypeAdapter(SplitRule)


def best_score(hits: Sequence[RankedHit]) -> float | None:
    """A product's best passage score: the reranker's calibrated score when reranked, else the similarity s."""
    reranked = [h.rerank_score for h in hits if h.rerank_score is not None]
    if reranked:
        return max(reranked)
    return max((h.score for h in hits), default=None)


def split_path(registry: Registry, router_version: str | None, index_version: str | None = None) -> Path | None:
    """Where the rule of a router version lives (None without a trained router: nothing to split by)."""
    return registry.path("router", router_version) / SPLIT_FILE if router_version else None


def save_split(rule: SplitRule, path: Path) -> None:
    """Write the fitted rule atomically."""
    write_json_atomic(path, rule.to_json())


def load_split(path: Path | None) -> SplitRule | None:
    """The fitted rule at ``path``, or None when none was fitted."""
    return load_fitted(path, SplitRule.from_json)
