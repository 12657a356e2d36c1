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
    s = sub.add_parser("ingest", help="index documents (docs.jsonl, or folders of .html/.md/.rst/.pdf/.txt pages)")
    s.add_argument("paths", nargs="+", help="docs.jsonl files, or folders of pages with one sub-folder per product")
    s.add_argument("--domain", help="domain of the pages (when PATH is one domain's folder or page)")
    s.add_argument(
        "--add",
        action="store_true",
        help="add the paths to the active index, keeping its other passages (default: the index mirrors the paths: "
        "passages of pages that left them or shrank are removed)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument(
        "--no-fit",
        action="store_true",
        help="do not fit the untrained 'not covered' decision (on a home without a trained router, an ingest fits one "
        "from the index's own section headings against the general questions shipped with fedqa)",
    )
    s.set_defaults(func=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest the paths and print the report."""
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:  # said at once, before the encoder is loaded
        raise FileNotFoundError(f"no such file or folder: {missing[0]}")
    from indexes.ingest import IngestMode, ingest, ingest_lock
    from indexes.loaders import LoadReport, check_inputs
    from service.artifacts import Registry

    paths = [Path(p) for p in args.paths]
    check_inputs(paths, domain=args.domain)  # every folder and file checked before a model loads
    mode = IngestMode.ADD if args.add else IngestMode.MIRROR
    loaded = LoadReport()
    with ingest_lock(Registry(settings().home_dir)):  # the fit reads the active index: the one this ingest activated
        report = ingest(paths, settings(), domain=args.domain, progress=not args.quiet, mode=mode, loaded=loaded)
        refit = report.changed or _stale_default(report.version)
        not_covered = _fit_not_covered(report.version) if refit and not args.no_fit else None
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
            "products": {d: r.summary() for d, r in sorted(loaded.domains.items())},
            "seconds": round(report.seconds, 1),
            "not_covered": not_covered,
        }
    )
    return 0


def _stale_default(version: str | None) -> bool:
    """Whether the index version's "not covered" default was fitted on an older form of its evidence
    (:attr:`service.generation.abstention.AbstentionModel.stale`) or without its known questions
    (:attr:`~service.generation.abstention.AbstentionModel.unasked`): an ingest of unchanged pages fits it again."""
    from service.artifacts import Registry
    from service.generation.abstention import abstention_path, load_abstention

    model = load_abstention(abstention_path(Registry(settings().home_dir), None, version))
    return model is not None and (model.stale or model.unasked)


def _fit_not_covered(version: str | None) -> dict | None:
    """On a home without a trained router, fit "not covered" for the new index version
    (:func:`training.abstention.fit_untrained`); what it measured, or None (a router is trained: its own decision
    serves)."""
    from service.artifacts import Registry

    cfg = settings()
    if version is None or Registry(cfg.home_dir).active()["router"]:
        return None
    from training.abstention import fit_untrained

    fitted = fit_untrained(cfg)
    if fitted.model is None:
        return {"fitted": False, "reason": "too few section headings to make in-scope questions from"}
    return {"fitted": True, **fitted.summary()}
