"""Probe: what a home's index holds, per product: passages by the folder of their page, short ones, and how many
hold each of some strings (the figures of the decision log's "Documentation as Debian ships it" entry).

    FEDQA_HOME=<home after fedqa ingest> python benchmarks/probes/passage_census.py [--holding "yaml 0.2.5" "¶" ...]

Per product: its passages, those from each top folder of its pages (``_sources``, ``_modules``, ...; pages at the
product's root count as ``.``), those under 25 words, and for each ``--holding`` string the passages whose title or
text holds it. Reads the active index's passages only (no model). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import Settings  # noqa: E402
from training.data.corpus import index_corpus  # noqa: E402

SHORT_WORDS = 25


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holding", nargs="*", default=[], help="strings to count the passages holding")
    args = ap.parse_args(argv)
    by_domain = defaultdict(list)
    for p in index_corpus(Settings()):  # the active index's passages, as the training commands read them
        by_domain[p.domain].append(p)
    out: dict[str, dict] = {}
    for domain, passages in sorted(by_domain.items()):
        folders = Counter(p.source.split("/")[1] if p.source.count("/") > 1 else "." for p in passages)
        out[domain] = {
            "passages": len(passages),
            "by_folder": dict(folders.most_common()),
            "under_25_words": sum(len(p.text.split()) < SHORT_WORDS for p in passages),
            "holding": {s: sum(s in p.title or s in p.text for p in passages) for s in args.holding},
        }
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
