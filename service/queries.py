"""Labelled questions in the exchange format (``queries.jsonl``), and the checks of what their labels name.

Every command that reads labelled questions checks them here before it loads a model: the products
(``domains``) and passages (``gold_doc_ids``) they name against a :class:`Catalogue` (an index's or a corpus's),
strictly (a :class:`LabelError` listing every bad line) or leniently (those labels left out, the lines returned);
an evaluation also needs every question's ``domains`` field (``require_domains``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
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
    where: str | None = field(default=None, compare=False, repr=False)  # "file:line" it was read from

    @property
    def is_cross(self) -> bool:
        """A question spanning more than one domain."""
        return len(self.domains) > 1


@dataclass(frozen=True)
class LabelProblem:
    """A label a question gives that cannot be used, and where the question was read."""

    where: str
    qid: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: qid {self.qid}: {self.reason}"


class LabelError(ValueError):
    """Labelled questions a command cannot use: every ``problems`` line, then what to do (``summary``)."""

    def __init__(self, summary: str, problems: Sequence[LabelProblem]) -> None:
        self.summary = summary
        self.problems = list(problems)
        super().__init__("\n".join([*map(str, self.problems), summary]))


MISSING_DOMAINS = (
    'without "domains" an evaluation cannot score a question: give the products that answer it '
    '(e.g. "domains": ["billing"]), or "domains": [] for a question no product answers (scored as out of scope)'
)


def load_queries(path: str | Path, *, require_domains: bool = False) -> list[LabelledQuery]:
    """Read ``queries.jsonl``; a ValueError names the first bad line. ``require_domains``: a :class:`LabelError`
    lists every question without a ``domains`` field (``"domains": []`` is a question out of scope on purpose)."""
    return load_files([path], require_domains=require_domains)


def load_files(paths: Sequence[str | Path], *, require_domains: bool = False) -> list[LabelledQuery]:
    """The questions of every file in order (see :func:`load_queries`); ``require_domains`` lists the questions
    without ``domains`` of every file in one :class:`LabelError`."""
    out: list[LabelledQuery] = []
    missing: list[LabelProblem] = []
    for path in paths:
        out.extend(_read(Path(path), missing))
    if require_domains and missing:
        files = ", ".join(dict.fromkeys(p.where.rsplit(":", 1)[0] for p in missing))
        raise LabelError(f'{len(missing)} of {len(out)} questions ({files}) have no "domains" field (listed above); {MISSING_DOMAINS}', missing)
    return out


def _read(path: Path, missing: list[LabelProblem]) -> list[LabelledQuery]:
    """The questions of one file; those without a ``domains`` field are added to ``missing``."""
    out: list[LabelledQuery] = []
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
                where=f"{path}:{n}",
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}:{n}: not a labelled query ({exc})") from None
        if "domains" not in rec:
            missing.append(LabelProblem(f"{path}:{n}", q.qid, 'no "domains" field'))
        out.append(q)
    return out


@dataclass(frozen=True)
class Catalogue:
    """What labels may name: the products and passage ids of an index version (or of a corpus), ``name`` saying which."""

    name: str  # "the index" or "the corpus", as the messages say it
    domains: frozenset[str]
    doc_ids: frozenset[str]

    @classmethod
    def of(cls, name: str, domains: Iterable[str], doc_ids: Iterable[str]) -> Catalogue:
        return cls(name, frozenset(domains), frozenset(doc_ids))


@dataclass(frozen=True)
class CheckedLabels:
    """Questions after the check: the usable ones (unknown labels left out) and what was left out, line by line."""

    queries: list[LabelledQuery]
    problems: list[LabelProblem]


def _problems(q: LabelledQuery, where: str, catalogue: Catalogue) -> list[LabelProblem]:
    known = ", ".join(sorted(catalogue.domains)) or "no products"
    out = [LabelProblem(where, q.qid, f"unknown product {d!r} ({catalogue.name} has: {known})") for d in q.domains if d not in catalogue.domains]
    out += [LabelProblem(where, q.qid, f"gold_doc_id {g!r} is not in {catalogue.name}") for g in q.gold_doc_ids if g not in catalogue.doc_ids]
    return out


def check_labels(queries: Sequence[LabelledQuery], catalogue: Catalogue, *, lenient: bool = False) -> CheckedLabels:
    """Questions whose products and gold passages ``catalogue`` holds. A question naming others is refused (a
    :class:`LabelError` listing each, with ``--lenient`` as the way out), or with ``lenient`` kept without those
    labels (dropped when no product is left of the ones it named)."""
    kept: list[LabelledQuery] = []
    problems: list[LabelProblem] = []
    for i, q in enumerate(queries, 1):
        found = _problems(q, q.where or f"question {i}", catalogue)
        problems.extend(found)
        if not found:
            kept.append(q)
            continue
        domains = [d for d in q.domains if d in catalogue.domains]
        if q.domains and not domains:
            continue
        kept.append(replace(q, domains=domains, gold_doc_ids=[g for g in q.gold_doc_ids if g in catalogue.doc_ids]))
    if problems and not lenient:
        raise unknown_labels(problems, catalogue)
    return CheckedLabels(kept, problems)


def unknown_labels(problems: Sequence[LabelProblem], catalogue: Catalogue) -> LabelError:
    """The error of labels naming what ``catalogue`` does not hold: each line, then how many questions and what to do."""
    lines = len({(p.where, p.qid) for p in problems})
    return LabelError(
        f"{lines} labelled question(s) name products or passages {catalogue.name} does not have (listed above): "
        "correct them, or pass --lenient to leave those labels out",
        problems,
    )
