"""Probe: "not covered" with compound identifiers counted whole in the index's vocabulary (issue 48:
docs/decisions/quality-log.md, "Identifiers counted whole"). The product counts snake_case names whole
(``service.retrieval.vocabulary.identifiers``, adopted from ``--underscore-only``); by default this probe also counts
names joined by dots alone (``sendmail.mc``), the variant measured and not adopted.

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
import unicodedata
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.retrieval import vocabulary  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[1]
IDENTIFIER = regex.compile(r"(?<![@\p{L}\p{N}_.-])[\p{L}\p{N}]+(?:[-_.][\p{L}\p{N}]+)+")
LETTER = regex.compile(r"\p{L}")


def identifiers(text: str, marks: str = "_.") -> set[str]:
    """The compound identifiers of ``text`` (the module docstring's rule; ``marks``: the joins one of which it needs)."""
    if not any(m in text for m in marks):
        return set()
    found = IDENTIFIER.findall(unicodedata.normalize("NFC", text).casefold())
    return {t for t in found if len(t) >= vocabulary.MIN_CHARS and LETTER.search(t) and any(m in t for m in marks)}


def main(argv: list[str]) -> None:
    marks = "_" if argv[:1] == ["--underscore-only"] else "_."  # only snake_case names (least_conn, not sendmail.mc)
    argv = argv[1:] if marks == "_" else argv
    if not argv or argv[0] not in ("manuals", "not_covered"):
        sys.exit("usage: identifier_terms.py [--underscore-only] manuals|not_covered <that benchmark's arguments>")
    stems = vocabulary.passage_terms
    vocabulary.passage_terms = lambda text: stems(text) | identifiers(text, marks)  # read by Vocabulary.of and _words
    vocabulary._FORM = "#form\tstem+identifier"  # a vocabulary stored by the product is counted again
    sys.argv = [str(BENCHMARKS / f"{argv[0]}.py"), *argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
