"""``fedqa index build|prune``: re-embed the active index's passages into a new index version; remove old versions."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``index build`` and ``index prune`` to the parser."""
    s = sub.add_parser("index", help="index versions")
    isub = s.add_subparsers(dest="what", required=True)
    t = isub.add_parser("build", help="re-embed the active index's passages with a retriever into a new index version")
    t.add_argument("--retriever", help="retriever version or 'base' (default: the active retriever)")
    t.add_argument("--no-activate", action="store_true", help="build the version without activating it")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_index_build)
    t = isub.add_parser("prune", help="remove old index versions and killed builds' leftovers (never the active one or one in use)")
    t.add_argument("--keep", type=int, required=True, metavar="N", help="newest complete versions to keep (the active one is kept besides)")
    t.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    t.set_defaults(func=cmd_index_prune)


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


def cmd_index_prune(args: argparse.Namespace) -> int:
    """Remove old index versions and build leftovers; print what was removed and what was kept, and why."""
    from indexes.prune import prune_indexes

    report = prune_indexes(settings(), args.keep, dry_run=args.dry_run)
    print_json({"removed": report.removed, "leftovers_removed": report.leftovers, "kept": report.kept, "dry_run": args.dry_run})
    return 0
