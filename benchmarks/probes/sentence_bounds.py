"""Probe: how often a sentence of the passages ends in the middle of a hard-wrapped line, before and after
service/text.py joined wrapped lines (issue 48, "Quotes in whole sentences").

    python benchmarks/probes/sentence_bounds.py ../shared/data/faq6/docs.jsonl --sample 3000

PATH: a docs.jsonl or a folder of them (``*.jsonl``, records with ``text``). For each splitter, ``lines`` (the
splitter before: every newline ends a sentence, then end marks) and ``joined`` (:func:`service.text.sentence_bounds`),
over the sampled passages: the sentences, the share that end mid-wrap (no end mark and no colon, and the next
sentence goes on in lower case in the same paragraph), the share with no end mark or colon at all, the share spanning
several lines, and words per sentence (mean, p95, max). Prints one JSON object. No model is loaded.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.jsonl import read_objects  # noqa: E402
from service.text import PROSE_END, SENTENCE_BREAK, sentence_bounds  # noqa: E402

_BLANK = re.compile(r"\n[^\S\n]*\n")


def line_bounds(text: str) -> list[tuple[int, int]]:
    """The splitter before issue 48: a newline ends a sentence, then end marks followed by a capital."""
    out: list[tuple[int, int]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        cuts = [0] + [m.end() for m in SENTENCE_BREAK.finditer(line)] + [len(line)]
        for a, b in pairwise(cuts):
            seg = line[a:b]
            if seg.strip():
                lead = len(seg) - len(seg.lstrip())
                out.append((pos + a + lead, pos + a + len(seg.rstrip())))
        pos += len(line)
    return out


def read_texts(path: Path) -> list[str]:
    """The ``text`` of every record of ``path`` (a JSONL file, or a folder of them); ValueError naming file:line."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: no *.jsonl file in the folder")
    texts = []
    for file in files:
        for n, rec in read_objects(file):
            if not isinstance(rec.get("text"), str):
                raise ValueError(f"{file}:{n}: the record has no text")
            texts.append(rec["text"])
    return texts


def measure(texts: list[str], split: Callable[[str], list[tuple[int, int]]]) -> dict:
    """The boundary figures of one splitter over ``texts`` (see the module docstring)."""
    n = mid_wrap = no_end = multi_line = 0
    lengths: list[int] = []
    for text in texts:
        bounds = split(text)
        for (a, b), nxt in zip(bounds, [*bounds[1:], None], strict=True):
            n += 1
            open_end = not PROSE_END.search(text[a:b])
            no_end += open_end
            # the next sentence goes on in lower case in the same paragraph (no blank line between them)
            mid_wrap += open_end and nxt is not None and text[nxt[0]].islower() and not _BLANK.search(text[b : nxt[0]])
            multi_line += "\n" in text[a:b]
            lengths.append(len(text[a:b].split()))
    share = (lambda k: round(k / n, 4)) if n else (lambda k: None)
    return {
        "sentences": n,
        "mid_wrap_share": share(mid_wrap),
        "no_end_mark_share": share(no_end),
        "multi_line_share": share(multi_line),
        "words_mean": round(float(np.mean(lengths)), 1) if lengths else None,
        "words_p95": int(np.percentile(lengths, 95)) if lengths else None,
        "words_max": max(lengths, default=None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path, help="docs.jsonl, or a folder of *.jsonl passages")
    ap.add_argument("--sample", type=int, default=3000, help="passages drawn at random (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        texts = read_texts(args.path)
    except (OSError, ValueError) as exc:
        sys.exit(f"error: {exc}")
    if 0 < args.sample < len(texts):
        texts = random.Random(args.seed).sample(texts, args.sample)
    out = {"path": str(args.path), "passages": len(texts), "lines": measure(texts, line_bounds), "joined": measure(texts, sentence_bounds)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
