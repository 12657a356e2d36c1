"""The demo knowledge base shipped with fedqa: four products of a fictional company.

``fedqa demo`` (:func:`service.cli.demo.setup_demo`) ingests it and trains its router.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
DOCS = DATA / "docs.jsonl"
QUERIES = DATA / "queries.jsonl"
OUT_OF_SCOPE = DATA / "out_of_scope.jsonl"  # generic questions the demo does not cover (written for fedqa)
