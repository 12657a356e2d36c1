"""Labelled questions as the commands read them: every file parsed, then checked against what the labels name (the
active index, a chosen index version, or a corpus) before a command loads a model (:mod:`service.queries`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from service.config import Settings
from service.queries import Catalogue, LabelledQuery, check_labels, load_files, unknown_labels

if TYPE_CHECKING:
    from service.retrieval.passage import Passage

LENIENT_HELP = "warn about labels naming products or passages the index does not have and leave those labels out (default: refuse)"


def add_lenient(parser: argparse.ArgumentParser) -> None:
    """``--lenient``: unknown products and gold passages are warned about and left out instead of refused."""
    parser.add_argument("--lenient", action="store_true", help=LENIENT_HELP)


def read_files(files: Sequence[str]) -> list[LabelledQuery]:
    """The questions of every file, in order (a ValueError names the first unreadable line)."""
    return load_files(files)


def index_catalogue(s: Settings, version: str | None = None) -> Catalogue:
    """The products (its manifest's) and passage ids (a payload scroll, no encoder) of an index version (default: the active one)."""
    from service.artifacts import Registry
    from training.data.corpus import index_corpus

    registry = Registry(s.home_dir)
    version = version or registry.active()["index"]
    if not version:
        raise ValueError(f"no index in {s.home_dir}: ingest documents first (fedqa ingest PATH)")
    domains = registry.manifest("index", version).get("domains") or {}
    return Catalogue.of("the index", domains, (p.doc_id for p in index_corpus(s, version)))


def corpus_catalogue(corpus: Sequence[Passage], name: str = "the corpus") -> Catalogue:
    """The products and passage ids of a corpus (``fedqa data build``'s, from files or the index)."""
    return Catalogue.of(name, (p.domain for p in corpus), (p.doc_id for p in corpus))


def checked(groups: Sequence[Sequence[LabelledQuery]], catalogue: Catalogue, *, lenient: bool) -> list[list[LabelledQuery]]:
    """Each group of questions (one command's files: in-scope, out-of-scope) without the labels ``catalogue`` does
    not hold. Without ``lenient`` one LabelError lists every such label of every group; with it each is warned about
    on stderr and left out (a question with no product left dropped)."""
    results = [check_labels(g, catalogue, lenient=True) for g in groups]
    problems = [p for r in results for p in r.problems]
    if problems and not lenient:
        raise unknown_labels(problems, catalogue)
    for p in problems:
        print(f"fedqa: warning: {p} (left out)", file=sys.stderr)
    if problems:
        dropped = sum(len(g) - len(r.queries) for g, r in zip(groups, results, strict=True))
        print(f"fedqa: warning: {len(problems)} label(s) left out, {dropped} question(s) with no product left dropped", file=sys.stderr)
    return [r.queries for r in results]


def labelled(files: Sequence[str], s: Settings, *, lenient: bool) -> list[LabelledQuery]:
    """The questions of ``files`` checked against the active index (see :func:`checked`)."""
    queries = read_files(files)
    return checked([queries], index_catalogue(s), lenient=lenient)[0]
