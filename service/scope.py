"""A caller's products (its API key's scope): what the pipeline routes among and searches for that caller.

The router's probabilities p_j are independent (sigmoids), so those of the allowed products need no
rescaling: the gate (its entropy and threshold) and the strategies normalise over the domains they are given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar


class ScopeError(ValueError):
    """A request for products outside the caller's products (HTTP 403, naming the request's field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def within(probs: Mapping[str, float], allowed: frozenset[str] | None, domains: list[str] | None = None) -> dict[str, float]:
    """The probabilities of the ``allowed`` products (None: every product), in the index's order.

    ScopeError when the ``domains`` filter names a product outside ``allowed`` (named only as the caller gave it),
    or when none of the allowed products is in the index."""
    if allowed is None:
        return dict(probs)
    check_domains(domains, allowed)
    kept = {d: p for d, p in probs.items() if d in allowed}
    if not kept:
        raise ScopeError("domains", "none of this API key's products is in the index in service")
    return kept


def check_domains(domains: list[str] | None, allowed: frozenset[str] | None, field: str = "domains") -> None:
    """ScopeError when ``domains`` names a product outside ``allowed`` (named only as the caller gave it)."""
    outside = [d for d in domains or [] if allowed is not None and d not in allowed]
    if outside:
        raise ScopeError(field, f"domain(s) {outside} are outside this API key's products")


def visible(job_scope: list[str] | None, allowed: frozenset[str] | None) -> bool:
    """Whether a caller with products ``allowed`` may see an evaluation job run within ``job_scope`` (None: every product)."""
    return allowed is None or (job_scope is not None and set(job_scope) <= allowed)


class Labelled(Protocol):
    """A labelled question: the products it belongs to."""

    domains: list[str]


L = TypeVar("L", bound=Labelled)


def labelled_within(queries: list[L], allowed: frozenset[str] | None) -> list[L]:
    """The labelled questions of a server-side dataset a caller may evaluate: those whose products (``domains``)
    are all ``allowed`` (questions of no product stay); the others' texts and labels would name other products."""
    if allowed is None:
        return queries
    return [q for q in queries if set(q.domains) <= allowed]
