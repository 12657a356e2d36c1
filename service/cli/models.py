"""``fedqa models list|activate|rollback|evaluate``: model and index versions of this home."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from service.artifacts import KINDS, Kind, Registry, VersionInfo
from service.cli.common import print_json, settings
from service.cli.labels import add_lenient, checked, index_catalogue, read_files

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add the ``models`` subcommands to the parser."""
    s = sub.add_parser("models", help="list, activate and roll back versions")
    msub = s.add_subparsers(dest="what", required=True)
    t = msub.add_parser("list", help="versions of every kind, with their metrics")
    t.add_argument("--kind", choices=list(KINDS), help="list only versions of this kind")
    t.set_defaults(func=cmd_models_list)
    t = msub.add_parser("activate", help="make a version active (kind from its name); the service picks it up on reload")
    t.add_argument("version", help="version name, as fedqa models list prints it")
    t.set_defaults(func=cmd_models_activate)
    t = msub.add_parser("rollback", help="re-activate the previously active version of a kind")
    t.add_argument("kind", choices=list(KINDS), help="kind of version to roll back")
    t.set_defaults(func=cmd_models_rollback)
    t = msub.add_parser("evaluate", help="retrieval Acc@1/Recall@5,10/MRR of an index version over its whole corpus")
    t.add_argument("--queries", nargs="+", required=True, help="labelled questions (queries.jsonl) with gold_doc_ids")
    t.add_argument("--index", help="index version (default: the active one)")
    add_lenient(t)
    t.set_defaults(func=cmd_models_evaluate)


def kind_of(version: str) -> Kind:
    """The kind of a version from its name (``router-...`` -> ``router``)."""
    prefix = version.split("-", 1)[0]
    for kind in KINDS:
        if kind == prefix:
            return kind
    raise ValueError(f"cannot tell the kind of {version!r}: versions are named <index|router|retriever|reranker>-...")


def _row(kind: str, v: VersionInfo) -> dict[str, Any]:
    """One version's line of ``models list``: its headline figures."""
    m = v.manifest
    row = {"version": v.version, "active": v.active, "created": m.get("created")}
    if kind == "index":
        row.update(retriever=m.get("retriever"), passages=m.get("passages"))
    elif kind == "router":
        row.update(val_top1_accuracy=m.get("val_top1_accuracy"), data_fingerprint=(m.get("data_fingerprint") or "")[:12])
    elif kind == "reranker":
        fit = (m.get("metrics") or {}).get("fit") or {}
        row.update(index=m.get("index"), retriever=m.get("retriever"), acc1=fit.get("acc@1"), acc1_before=fit.get("acc@1_before"))
    else:
        metrics = m.get("metrics") or {}
        row.update(
            base_acc1=(metrics.get("base") or {}).get("acc@1"),
            fine_tuned_acc1=(metrics.get("fine_tuned") or {}).get("acc@1"),
            data_fingerprint=(m.get("data_fingerprint") or "")[:12],
        )
    return row


def cmd_models_list(args: argparse.Namespace) -> int:
    """Print every version of each kind (or of ``--kind``) and the active set."""
    reg = Registry(settings().home_dir)
    out = {kind: [_row(kind, v) for v in reg.list(kind)] for kind in ([args.kind] if args.kind else KINDS)}
    active = reg.active()
    active["retriever"] = active["retriever"] or "base"  # no trained one active: the base model, as /readyz says
    print_json({"home": str(reg.home), "active": active, "versions": out})
    return 0


def cmd_models_activate(args: argparse.Namespace) -> int:
    """Activate a version; the service picks it up on reload."""
    reg = Registry(settings().home_dir)
    kind = kind_of(args.version)
    reg.activate(kind, args.version)
    print_json({"activated": args.version, "kind": kind, "active": reg.active()}, indent=None)
    if kind == "retriever":
        print(f"the service keeps its index's encoder until 'fedqa index build' re-embeds with {args.version}", file=sys.stderr)
    return 0


def cmd_models_rollback(args: argparse.Namespace) -> int:
    """Re-activate the previously active version of a kind."""
    reg = Registry(settings().home_dir)
    version = reg.rollback(args.kind)
    print_json({"rolled_back_to": version, "kind": args.kind, "active": reg.active()}, indent=None)
    return 0


def cmd_models_evaluate(args: argparse.Namespace) -> int:
    """Retrieval metrics of an index version over its whole corpus (the questions' labels checked against it first)."""
    from training.evaluate import evaluate_index

    s = settings()
    queries = read_files(args.queries)
    [queries] = checked([queries], index_catalogue(s, args.index), lenient=args.lenient)
    print_json(evaluate_index(s, queries, version=args.index))
    return 0
