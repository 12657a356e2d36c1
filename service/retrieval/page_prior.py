"""The page prior: where the labelled questions were answered, as a bonus to the unified score.

A documentation set answers most questions from a few pages (on faq6 the 221 dev questions are answered from 31
pages holding 721 of its 21,416 passages: the products' FAQs). The passages of a page that answered ``n`` of the
labelled training questions rank by

    U' = U + weight * log(1 + n)

(U = w_j * s+, the strategy's unified score; every other passage keeps U), over each searched domain's top ``depth``
hits. The counts come from the labelled questions' gold passages (each question once per page), the weight and depth
are fitted on held-out questions by ``fedqa train router`` (training/page_prior.py) and stored with the router
version with the questions counted; weight 0 is the ranking without it. It applies to the default strategy and to a
product filter (the per-product answers), not to the baselines (uis, rfs, mkpqa, lfs), which rank as the method
defines them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from service.retrieval.passage import point_id


@dataclass(frozen=True)
class PagePrior:
    """Fitted weight and depth; the labelled questions counted (their gold doc_ids) and the passages of their pages."""

    weight: float
    depth: int
    members: Mapping[str, Sequence[str]]  # page (a passage's ``source``) -> doc_ids of its passages in the index
    answers: Mapping[str, Sequence[str]]  # qid -> gold doc_ids of each labelled question counted
    page_of: Mapping[str, str] = field(init=False, repr=False, compare=False)  # doc_id -> its page, for the members
    pages: Mapping[str, int] = field(init=False, repr=False, compare=False)  # page -> questions counted there
    bonus: Mapping[str, float] = field(init=False, repr=False, compare=False)  # point id -> weight * log(1 + n)

    def __post_init__(self) -> None:
        if self.weight < 0 or self.depth < 1:
            raise ValueError(f"a page prior needs weight >= 0 and depth >= 1 (got {self.weight}, {self.depth})")
        page_of = {d: page for page, ids in self.members.items() for d in ids}
        pages: dict[str, int] = {}
        for gold in self.answers.values():
            for page in {page_of[d] for d in gold if d in page_of}:
                pages[page] = pages.get(page, 0) + 1
        bonus = {}
        if self.weight > 0:
            for page, n in pages.items():
                bonus.update({point_id(d): self.weight * math.log1p(n) for d in self.members[page]})
        object.__setattr__(self, "page_of", page_of)
        object.__setattr__(self, "pages", pages)
        object.__setattr__(self, "bonus", bonus)

    @property
    def active(self) -> bool:
        """Whether it changes any ranking (a weight above 0 and a page with questions)."""
        return bool(self.bonus)

    def without(self, gold_doc_ids: Iterable[str]) -> PagePrior:
        """The same prior without every counted question that shares a gold passage with ``gold_doc_ids`` (to score
        those questions as if they had not been counted: a joined question and its parts share their passages)."""
        gone = set(gold_doc_ids)
        return replace(self, answers={q: ids for q, ids in self.answers.items() if gone.isdisjoint(ids)})

    def to_json(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "depth": self.depth,
            "pages": dict(self.pages),  # for reading; recounted from ``answers`` when loaded
            "members": {p: list(ids) for p, ids in self.members.items()},
            "answers": {q: list(ids) for q, ids in self.answers.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PagePrior:
        """Read the stored form; ValueError when a field is missing or invalid."""
        try:
            return cls(
                weight=float(data["weight"]),
                depth=int(data["depth"]),
                members={str(p): [str(d) for d in ids] for p, ids in data["members"].items()},
                answers={str(q): [str(d) for d in ids] for q, ids in data["answers"].items()},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"stored page prior is incomplete: {exc!r}") from exc
