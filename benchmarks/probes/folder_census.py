"""Probe: what ``fedqa ingest`` would read from a folder of products' pages, without embedding anything.

    python benchmarks/probes/folder_census.py <folder: one sub-folder per product> [--domain NAME]

Reads and cuts the pages as ``fedqa ingest`` does (the shipped MiniLM's tokenizer, the default passage length) and
prints per product: its ingest report line (pages read and skipped, passages, lengths), the skipped pages counted by
the start of their reason (before any page name or quote), the passages under 25 words, the distinct passage texts and
(``--title-ends Note Tip``) the passages whose title's last part is one of the words; ``--furniture``: the text read
once as site furniture, with how many of the product's pages hold it. One JSON object.
The figures of the decision log's "A manual in a folder per language" entry (Debian's apache2-doc).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from indexes.loaders import LoadReport, folder_pages, load_paths, read_doc, segmentation_for  # noqa: E402
from indexes.variants import site_furniture  # noqa: E402
from service.config import Settings  # noqa: E402
from service.retrieval.encoder import packaged_minilm_path, token_counter  # noqa: E402

SHORT_WORDS = 25


def reason_kind(reason: str) -> str:
    """A skip reason up to the first page name, quote or parenthesis: "a link to", "in 'de'", "unsupported file type .png"."""
    return re.split(r" \(|,| [\w.-]+/", reason, maxsplit=1)[0]


def furniture(folder: Path, domain: str | None) -> dict[str, dict[str, str]]:
    """Per product, each text read once as site furniture (:func:`indexes.variants.site_furniture`) with the pages
    holding it, "n of m" (its pages read again: a probe's second pass)."""
    docs = defaultdict(list)
    report = LoadReport()
    for page in folder_pages(folder, domain=domain, report=report):
        if (doc := read_doc(page, report)) is not None:
            docs[page.domain].append(doc)
    out = {}
    for dom, held in docs.items():
        texts = site_furniture(held)
        pages = Counter(t for doc in held for t in {" ".join(b.text.split()) for b in doc.blocks} & texts)
        out[dom] = {t: f"{n} of {len(held)}" for t, n in pages.most_common()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="one sub-folder per product (or one product's folder with --domain)")
    ap.add_argument("--domain", help="the folder is this one product's")
    ap.add_argument("--title-ends", nargs="*", default=[], help="count the passages whose title's last part is one of these")
    ap.add_argument("--furniture", action="store_true", help="list the text read once as site furniture, with its pages")
    args = ap.parse_args(argv)
    cut = segmentation_for(Settings(), token_counter(packaged_minilm_path()))
    report = LoadReport()
    texts: dict[str, Counter[str]] = defaultdict(Counter)
    ends: dict[str, Counter[str]] = defaultdict(Counter)
    for p in load_paths([args.folder], domain=args.domain, segmentation=cut, report=report):
        texts[p.domain][p.text] += 1
        last = p.title.rsplit(" > ", 1)[-1].strip()
        if last in args.title_ends:
            ends[p.domain][last] += 1
    out = {}
    for domain, record in sorted(report.domains.items()):
        line = record.summary()
        out[domain] = {
            **{k: v for k, v in line.items() if k != "skipped"},
            "skipped_by_reason": dict(Counter(reason_kind(s["reason"]) for s in line["skipped"]).most_common()),
            "under_25_words": sum(n for t, n in texts[domain].items() if len(t.split()) < SHORT_WORDS),
            "distinct_passage_texts": len(texts[domain]),
            **({"titles_ending": dict(ends[domain])} if args.title_ends else {}),
        }
    if args.furniture:
        for domain, held in furniture(args.folder, args.domain).items():
            out[domain]["furniture"] = held
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
