"""Labelled questions in the exchange format (``queries.jsonl``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from service.jsonl import read_objects


@dataclass(frozen=True)
class LabelledQuery:
    """A question with the domains it belongs to and the passages that answer it."""

    qid: str
    query: str
    domains: list[str]
    gold_doc_ids: list[str] = field(default_factory=list)
    answer: str | None = None
    kind: str | None = None
    parts: list[str] = field(default_factory=list)
    grading_note: str | None = None

    @property
    def is_cross(self) -> bool:
        """A question spanning more than one domain."""
        return len(self.domains) > 1


def load_queries(path: str | Path) -> list[LabelledQuery]:
    """Read ``queries.jsonl``; a ValueError names the first bad line."""
    out: list[LabelledQuery] = []
    path = Path(path)
    for n, rec in read_objects(path):
        if not isinstance(rec.get("query"), str) or not rec["query"].strip():
            raise ValueError(f'{path}:{n}: no "query" (the text of the question)')
        try:
            q = LabelledQuery(
                qid=str(rec.get("qid") or f"{path.stem}-{n}"),
                query=str(rec["query"]),
                domains=[str(d) for d in rec.get("domains") or []],
                gold_doc_ids=[str(d) for d in rec.get("gold_doc_ids") or []],
                answer=rec.get("answer"),
                kind=rec.get("kind"),
                parts=[str(x) for x in rec.get("parts") or []],
                grading_note=rec.get("grading_note"),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}:{n}: not a labelled query ({exc})") from None
        out.append(q)
    return out
