"""``fedqa ingest``: a new index version that mirrors the given documents (``--add``: adds them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``ingest`` to the parser."""
    s = sub.add_parser("ingest", help="index documents (docs.jsonl, or folders of .md/.html/.txt pages)")
    s.add_argument("paths", nargs="+")
    s.add_argument("--domain", help="domain of the pages (when PATH is one domain's folder or page)")
    s.add_argument(
        "--add",
        action="store_true",
        help="add the paths to the active index, keeping its other passages (default: the index mirrors the paths: "
        "passages of pages that left them or shrank are removed)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest the paths and print the report."""
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:  # said at once, before the encoder is loaded
        raise FileNotFoundError(f"no such file or folder: {missing[0]}")
    from indexes.ingest import IngestMode, ingest

    mode = IngestMode.ADD if args.add else IngestMode.MIRROR
    report = ingest([Path(p) for p in args.paths], settings(), domain=args.domain, progress=not args.quiet, mode=mode)
    print_json(
        {
            "index": report.version,
            "new_version": report.changed,
            "mode": mode.value,
            "added": report.added,
            "changed": report.updated,
            "removed": report.removed,
            "unchanged": report.unchanged,
            "duplicates_dropped": report.duplicates,
            "domains": report.domains,
            "seconds": round(report.seconds, 1),
        }
    )
    return 0
