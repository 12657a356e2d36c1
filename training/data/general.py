"""Out-of-scope questions shipped with the package, for a home whose owner gave none.

Everyday questions and support questions about widely known consumer software (``service/reranking/data/
general_oos.jsonl``, written for fedqa): what no company's product documentation answers. They hold no
version-control, shell, programming-language, database or Linux-distribution questions, the families kept for
measuring "not covered" on neighbouring products.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from service.queries import LabelledQuery, load_queries

GENERAL_FILE = "general_oos.jsonl"


def general_negatives() -> list[LabelledQuery]:
    """The shipped out-of-scope questions (``kind: "oos"``, no domain)."""
    return load_queries(Path(str(resources.files("service.reranking") / "data" / GENERAL_FILE)))
