"""What a reranker version fitted on its validation questions, and the reranked order it defines.

The combined score of a passage of the merged top-``depth`` is ``U + weight * ce``: U the unified score the
strategy ranked by (w_j * s+), ce the cross-encoder's logit. ``weight`` 0 keeps the strategy's order. The
calibrated score ``sigmoid(a * ce + b)`` (Platt scaling, fitted on the validation candidates: the gold passage
against the others) is what a source shows and what the "not covered" decision reads. ``titles``: the model reads
each passage as ``title: text`` (the way it was trained), so the page and section a passage comes from are read too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import TypeAdapter
from scipy.special import expit

from service.artifacts import read_stored

PARAMS_FILE = "rerank.json"


@dataclass(frozen=True)
class RerankParams:
    """The fitted combination: ``U + weight * ce`` over the top ``depth``; ``sigmoid(scale * ce + shift)`` calibrated."""

    weight: float
    depth: int
    scale: float = 1.0
    shift: float = 0.0
    max_length: int = 128
    titles: bool = False

    def passage_text(self, title: str, text: str) -> str:
        """What the cross-encoder reads of a passage (:func:`passage_text` in this version's format)."""
        return passage_text(title, text, titles=self.titles)

    def combined(self, unified: Sequence[float], ce: Sequence[float]) -> np.ndarray:
        """The combined scores ``U + weight * ce`` (:func:`combined_scores` with this weight)."""
        return combined_scores(unified, ce, self.weight)

    def order(self, unified: Sequence[float], ce: Sequence[float]) -> list[int]:
        """Positions of the candidates in reranked order (:func:`reranked_order` with this weight)."""
        return reranked_order(unified, ce, self.weight)

    def calibrated(self, ce: float) -> float:
        """P(the passage answers the question) from its cross-encoder logit."""
        z = self.scale * ce + self.shift
        return float(expit(max(-50.0, min(50.0, z))))  # z bounded as when math.exp needed it: scores unchanged

    def to_json(self) -> dict[str, Any]:
        """The stored form (``rerank.json``)."""
        return _STORED.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = PARAMS_FILE) -> RerankParams:
        """Read the stored form (a field a version saved before it existed: its default); ValueError naming ``name``
        when a field is missing or of the wrong type."""
        return read_stored(_STORED, data, name)


_STORED = TypeAdapter(RerankParams)


def passage_text(title: str, text: str, *, titles: bool) -> str:
    """A passage as a reranker reads it: ``title: text`` with ``titles`` (and a title), else the text alone."""
    return f"{title}: {text}" if titles and title else text


def combined_scores(unified: Sequence[float], ce: Sequence[float], weight: float) -> np.ndarray:
    """Each candidate's combined score ``U + weight * ce``, what the reranked order sorts by."""
    return np.asarray(unified, dtype=np.float64) + weight * np.asarray(ce, dtype=np.float64)


def reranked_order(unified: Sequence[float], ce: Sequence[float], weight: float) -> list[int]:
    """Positions of the candidates in reranked order (ties keep the strategy's order)."""
    return order_by(combined_scores(unified, ce, weight))


def order_by(combined: Sequence[float] | np.ndarray) -> list[int]:
    """Positions of the candidates by combined score, highest first (ties keep the strategy's order)."""
    return sorted(range(len(combined)), key=lambda i: (-combined[i], i))
