"""Probe: "not covered" with compound identifiers counted whole in the index's vocabulary (issue 48:
docs/decisions/quality-log.md, "Identifiers counted whole"). The product counts snake_case names whole
(``service.retrieval.vocabulary.identifiers``, adopted from ``--underscore-only``); by default this probe also counts
names joined by dots (``sendmail.mc``), the variant measured and not adopted; ``--underscore-only`` runs the benchmark
on the product's own vocabulary (the figures measured before the product adopted it).

    HF_HUB_OFFLINE=1 python benchmarks/probes/identifier_terms.py [--underscore-only] manuals --data ../shared/data/manuals_dev \
        --home <new home> --out m.json
    HF_HUB_OFFLINE=1 FEDQA_HOME=<refresh fold home> python benchmarks/probes/identifier_terms.py not_covered \
        --in-scope W/foldN/heldout.jsonl --oos ../shared/data/oos_dev.jsonl ../shared/data/oos_family_dev.jsonl \
        --named ../shared/data/oos_family_dev_named.jsonl --false-refusal 0.02 0.03

Runs ``benchmarks/manuals.py`` (its ``--labelled`` refreshes in this process too) or ``benchmarks/not_covered.py``
with its arguments, in this process, after making
:func:`service.retrieval.vocabulary.passage_terms` also return the compound identifiers of a text: runs of letters
and digits joined by ``-``, ``_`` or ``.``, at least one ``_`` or ``.`` among the joins, holding a letter, of 3 or
more characters, not the host of an e-mail address (``least_conn``, ``sendmail.mc``, ``main.cf``; not ``x-axis``,
``2.4.1`` or ``me@box.localdomain``), case-folded, unstemmed. The vocabulary's form line changes with it, so a
stored vocabulary is counted again and the same homes serve both arms; ``rare_word`` and ``uncovered`` then read the
identifiers (a question naming another product's setting, "least_conn", splits into words the manual holds, "least"
and "conn", while the setting itself is in no passage).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.retrieval import vocabulary  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[1]


def dotted_names(text: str) -> set[str]:
    """The names of ``text`` joined by ``.`` (``sendmail.mc``): what this probe adds to the product's vocabulary, which
    counts those with an ``_`` (:func:`service.retrieval.vocabulary.identifiers`, whose rule they follow)."""
    return vocabulary.identifiers(text, join=".")


def main(argv: list[str]) -> None:
    product = argv[:1] == ["--underscore-only"]  # the product's own vocabulary: snake_case names (least_conn) only
    argv = argv[1:] if product else argv
    if not argv or argv[0] not in ("manuals", "not_covered"):
        sys.exit("usage: identifier_terms.py [--underscore-only] manuals|not_covered <that benchmark's arguments>")
    if not product:
        counted = vocabulary.passage_terms
        vocabulary.passage_terms = lambda text: counted(text) | dotted_names(text)  # read by Vocabulary.of and _words
        vocabulary._FORM = "#form\tstem+snake+dotted"  # a vocabulary stored by the product is counted again
    sys.argv = [str(BENCHMARKS / f"{argv[0]}.py"), *argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
