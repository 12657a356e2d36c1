"""Questions asked before whose verdict is known: the reference of the "not covered" evidence ``nearest_out``.

A question about something the documentation does not cover tends to resemble other such questions more than any
question the documentation answers; one about a product a curator marked "not covered" resembles the questions marked
(faq6's neighbouring products: half of each product's questions marked, the other half is nearer to them than to any
labelled in-scope question for most of it). So the evidence reads

    nearest_out = max cosine to a known out-of-scope question - max cosine to a known in-scope question

over the query vectors of the retriever (a message of several questions: its least out-of-scope question; the
in-scope questions read are those of the caller's products, or of the one product an answer by product is for). The
known questions are those the "not covered" model was fitted on (stored with it: :mod:`training.abstention` computes
each fitting question's value against the others, itself and its repeats left out) and, while the service runs, the
questions trusted feedback labelled (:meth:`AskedQuestions.with_feedback`): a question marked "not covered" is a
known out-of-scope question from the moment it is marked, a confirmed one a known in-scope question. Feedback counts
only for a caller whose products the feedback's keys all see (its scope), as every other use of feedback does.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

#: A row's scope: the products the feedback that made it known touches (None: every caller's).
Scope = frozenset[str] | None


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32 (a zero row stays zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True) if v.size else np.ones((len(v), 1), dtype=np.float32)
    return v / np.where(norms > 0, norms, 1.0)


def _best(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per row of ``vectors``, the highest cosine to a row of ``reference`` (0 when it has none)."""
    if not len(reference):
        return np.zeros(len(vectors), dtype=np.float32)
    return (vectors @ reference.T).max(axis=1)


def _in_scope(rows: int, scopes: tuple[Scope, ...], allowed: frozenset[str] | None) -> np.ndarray:
    """Which of ``rows`` count for a caller of ``allowed``: the fitted ones, and feedback's (the last ``len(scopes)``)
    within their scope."""
    keep = np.ones(rows, dtype=bool)
    if scopes:
        keep[rows - len(scopes) :] = [_applies(s, allowed) for s in scopes]
    return keep


def _applies(scope: Scope, allowed: frozenset[str] | None) -> bool:
    """Whether a row of ``scope`` counts for a caller of products ``allowed`` (None: every product)."""
    return scope is None or (allowed is not None and allowed <= scope)


@dataclass(frozen=True, eq=False)
class AskedQuestions:
    """The known in-scope (``inside``) and out-of-scope (``outside``) questions' unit query vectors, each feedback
    row's scope (the fitted rows come first and have none: every caller's), and each in-scope row's products."""

    inside: np.ndarray
    outside: np.ndarray
    inside_scopes: tuple[Scope, ...] = field(default=(), compare=False)
    outside_scopes: tuple[Scope, ...] = field(default=(), compare=False)
    inside_domains: tuple[frozenset[str], ...] = ()  # each in-scope row's products (empty: not recorded, every one's)

    def __eq__(self, other: object) -> bool:
        """The same rows and scopes (the arrays compared by value)."""
        if not isinstance(other, AskedQuestions):
            return NotImplemented
        return (
            np.array_equal(self.inside, other.inside)
            and np.array_equal(self.outside, other.outside)
            and (self.inside_scopes, self.outside_scopes, self.inside_domains) == (other.inside_scopes, other.outside_scopes, other.inside_domains)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays: not hashable

    def nearest_out(self, vectors: np.ndarray, allowed: frozenset[str] | None = None, product: str | None = None) -> float:
        """``nearest_out`` of a message whose questions' query vectors are ``vectors`` (rows), for a caller of products
        ``allowed`` (None: every product): the lowest of its questions' values. The in-scope questions read are those
        of the caller's products (of ``product`` alone when the answer is that product's: an answer by product), as
        the rest of the evidence reads their documentation only."""
        q = unit_rows(np.atleast_2d(vectors))
        within = frozenset({product}) if product is not None else allowed
        keep_in = _in_scope(len(self.inside), self.inside_scopes, allowed)
        if within is not None and len(self.inside_domains) == len(self.inside):
            keep_in &= np.any([self._of_product.get(p, self._none) for p in within], axis=0) if within else self._none
        inside = self.inside[keep_in]
        outside = self.outside[_in_scope(len(self.outside), self.outside_scopes, allowed)]
        values = _best(q, outside) - _best(q, inside)
        return float(values.min()) if len(values) else 0.0

    @cached_property
    def _of_product(self) -> dict[str, np.ndarray]:
        """Per product, which in-scope rows are its questions (computed once: each request reads it)."""
        products = {p for d in self.inside_domains for p in d}
        return {p: np.array([p in d for d in self.inside_domains], dtype=bool) for p in products}

    @cached_property
    def _none(self) -> np.ndarray:
        return np.zeros(len(self.inside), dtype=bool)

    def with_feedback(
        self,
        inside: np.ndarray,
        inside_scopes: Sequence[Scope],
        inside_domains: Sequence[frozenset[str]],
        outside: np.ndarray,
        outside_scopes: Sequence[Scope],
    ) -> AskedQuestions:
        """The fitted rows and feedback's questions (query vectors, each with its scope; the in-scope ones with their
        products) after them, in place of any feedback added before."""
        base_in, base_out = self.fitted
        fitted_domains = self.inside_domains[: len(base_in)]
        return AskedQuestions(
            np.vstack([base_in, unit_rows(inside).reshape(-1, base_in.shape[1])]),
            np.vstack([base_out, unit_rows(outside).reshape(-1, base_out.shape[1])]),
            tuple(inside_scopes),
            tuple(outside_scopes),
            tuple(fitted_domains) + tuple(inside_domains) if len(fitted_domains) == len(base_in) else (),
        )

    @property
    def fitted(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows the model was fitted with (no feedback's)."""
        return self.inside[: len(self.inside) - len(self.inside_scopes)], self.outside[: len(self.outside) - len(self.outside_scopes)]

    @property
    def dim(self) -> int:
        return int(self.inside.shape[1]) if self.inside.ndim == 2 else 0

    def to_json(self) -> dict[str, Any]:
        """The stored form: the fitted rows as little-endian float16, base64."""
        base_in, base_out = self.fitted
        domains = [sorted(d) for d in self.inside_domains[: len(base_in)]]
        return {"dim": self.dim, "inside": _encoded(base_in), "outside": _encoded(base_out), "inside_domains": domains}

    @classmethod
    def from_json(cls, data: object) -> AskedQuestions:
        """Read the stored form; ValueError when it is not one."""
        if isinstance(data, AskedQuestions):
            return data
        if not isinstance(data, dict) or not isinstance(data.get("dim"), int) or data["dim"] < 1:
            raise ValueError("stored asked questions need a positive 'dim' and base64 'inside' and 'outside' rows")
        inside = _decoded(data.get("inside"), data["dim"])
        domains = data.get("inside_domains") or []
        if not isinstance(domains, list) or (domains and len(domains) != len(inside)) or not all(isinstance(d, list) for d in domains):
            raise ValueError(f"stored asked questions: 'inside_domains' must list the products of each of the {len(inside)} in-scope rows")
        return cls(inside, _decoded(data.get("outside"), data["dim"]), inside_domains=tuple(frozenset(map(str, d)) for d in domains))


def _encoded(matrix: np.ndarray) -> str:
    return base64.b64encode(np.asarray(matrix, dtype="<f2").tobytes()).decode("ascii")


def _decoded(stored: object, dim: int) -> np.ndarray:
    if not isinstance(stored, str):
        raise ValueError(f"stored asked questions' rows are base64 text, not {type(stored).__name__}")
    flat = np.frombuffer(base64.b64decode(stored, validate=True), dtype="<f2").astype(np.float32)
    if flat.size % dim:
        raise ValueError(f"stored asked questions: {flat.size} numbers are not rows of {dim}")
    return flat.reshape(-1, dim)


def leave_one_out(
    parts: Sequence[np.ndarray],
    texts: Sequence[str],
    inside: np.ndarray,
    inside_texts: Sequence[str],
    outside: np.ndarray,
    outside_texts: Sequence[str],
) -> np.ndarray:
    """``nearest_out`` of each question (its questions' query vectors ``parts[i]``, rows, as retrieval split it; its
    text ``texts[i]``) against the reference rows, leaving out the rows of the same text (the question itself and its
    repeats): the value a fitting question has as a new one. A message of several questions reads its least
    out-of-scope question's, as :meth:`AskedQuestions.nearest_out` serves it."""
    counts = [len(np.atleast_2d(p)) for p in parts]
    if not counts:
        return np.zeros(0, dtype=np.float64)
    q = unit_rows(np.vstack([np.atleast_2d(p) for p in parts]))
    names = [t for t, n in zip(texts, counts, strict=True) for _ in range(n)]
    values = np.empty(len(q), dtype=np.float64)
    for start in range(0, len(q), 512):  # bounded memory: 512 rows against the reference at a time
        window = slice(start, start + 512)
        values[window] = _best_other(q[window], names[window], outside, outside_texts) - _best_other(q[window], names[window], inside, inside_texts)
    return np.minimum.reduceat(values, np.r_[0, np.cumsum(counts)[:-1]])


def _best_other(q: np.ndarray, names: Sequence[str], reference: np.ndarray, reference_texts: Sequence[str]) -> np.ndarray:
    if not len(reference):
        return np.zeros(len(q))
    sims = q @ reference.T
    same = np.asarray(names, dtype=object)[:, None] == np.asarray(reference_texts, dtype=object)[None, :]
    sims[same] = -np.inf
    best = sims.max(axis=1)
    return np.where(np.isfinite(best), best, 0.0)
