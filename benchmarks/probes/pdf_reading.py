"""Probe: how a PDF manual is cut into passages (the reader ``fedqa ingest`` uses, ``indexes/markup.py``).

    python benchmarks/probes/pdf_reading.py FILE.pdf [FILE.pdf ...]

For each PDF: its passages (``FEDQA_MAX_PASSAGE_TOKENS`` 256 and ``FEDQA_MIN_PASSAGE_CHARS`` 200, the defaults), how
many distinct titles they have (1: no sections were found), their words, the alphabetic words over 22 letters
(words run together by the text extraction: "Descriptionofacopy"), and the passages holding dot leaders (". . . .":
a table of contents read as text), and the code blocks read (a block mostly in a monospaced font) with their lines.
Prints one JSON object; loads no model (the tokenizer's vocabulary only).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from indexes.document import BlockKind  # noqa: E402
from indexes.markup import PageKind, read_page  # noqa: E402
from indexes.segment import Segmentation, passages  # noqa: E402
from service.retrieval.encoder import packaged_minilm_path, token_counter  # noqa: E402

LONG_WORD = 22


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pdfs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # font warnings of the PDF libraries
    cut = Segmentation(token_counter(packaged_minilm_path()), 256, 200)
    out = {}
    for path in args.pdfs:
        doc = read_page(path, PageKind.PDF)
        parts = passages(doc, path.stem, cut)
        words = [w for p in parts for w in p.text.split()]
        out[str(path)] = {
            "passages": len(parts),
            "titles": len({p.title for p in parts}),
            "words": len(words),
            "long_words": sum(len(w) > LONG_WORD and w.isalpha() for w in words),
            "dot_leader_passages": sum(". . . ." in p.text for p in parts),
            "code_blocks": sum(b.kind is BlockKind.CODE for b in doc.blocks),
            "code_lines": sum(b.text.count("\n") + 1 for b in doc.blocks if b.kind is BlockKind.CODE),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
