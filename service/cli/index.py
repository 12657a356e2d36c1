"""``fedqa index build``: re-embed the active index's passages into a new index version."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``index build`` to the parser."""
    s = sub.add_parser("index", help="index versions")
    isub = s.add_subparsers(dest="what", required=True)
    t = isub.add_parser("build", help="re-embed the active index's passages with a retriever into a new index version")
    t.add_argument("--retriever", help="retriever version or 'base' (default: the active retriever)")
    t.add_argument("--no-activate", action="store_true")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_index_build)


def cmd_index_build(args: argparse.Namespace) -> int:
    """Build the new index version and print its passages per domain."""
    from indexes.rebuild import rebuild_index

    report = rebuild_index(settings(), retriever=args.retriever, activate=not args.no_activate, progress=not args.quiet)
    print_json(
        {
            "index": report.version,
            "activated": not args.no_activate,
            "passages": sum(report.domains.values()),
            "domains": report.domains,
            "seconds": round(report.seconds, 1),
        }
    )
    return 0
