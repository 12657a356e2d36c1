"""``fedqa domains``: the active versions and domains of this home."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.artifacts import Registry
from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``domains`` to the parser."""
    s = sub.add_parser("domains", help="show the active versions and domains of this home")
    s.set_defaults(func=cmd_domains)


def cmd_domains(args: argparse.Namespace) -> int:
    """Print the home, its active versions and the active index's passages per domain."""
    reg = Registry(settings().home_dir)
    manifest = reg.active_manifest("index") or {}
    print_json({"home": str(reg.home), "active": reg.active(), "domains": manifest.get("domains", {})})
    return 0
