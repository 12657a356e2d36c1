"""``fedqa feedback list|export``: the curators' review queue of the feedback callers sent (``POST /feedback``), and
the labelled questions it establishes, for a refit (feedback does not change answers until then)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers
    from service.feedback.review import QueueItem
    from service.feedback.store import StoredVote


def register(sub: Subparsers) -> None:
    """Add ``feedback list`` and ``feedback export`` to the parser."""
    s = sub.add_parser("feedback", help="review the feedback callers sent (POST /feedback) and export it as labelled questions")
    fsub = s.add_subparsers(dest="what", required=True)
    t = fsub.add_parser("list", help="questions rated down, marked not covered or never confirmed by a trusted key, most distinct keys first")
    t.add_argument("--limit", type=int, default=20, help="most questions listed")
    t.add_argument("--json", action="store_true", help="print the queue as JSON (the body of GET /admin/feedback)")
    t.set_defaults(func=cmd_feedback_list)
    t = fsub.add_parser(
        "export", help="write the questions feedback labels (queries.jsonl, for 'fedqa train router --queries') and those not covered"
    )
    t.add_argument("--out", required=True, help="labelled questions: qid, query, domains, gold_doc_ids (from passages rated up)")
    t.add_argument(
        "--out-of-scope",
        help="questions marked not covered, for --out-of-scope (fedqa train abstention, fedqa data build); default: OUT's name + _out_of_scope",
    )
    t.add_argument(
        "--min-keys",
        type=int,
        default=None,
        help="distinct keys that must agree when no trusted (curator or admin) key said it (default: FEDQA_FEEDBACK_MIN_KEYS)",
    )
    t.set_defaults(func=cmd_feedback_export)


def _votes() -> list[StoredVote]:
    """The stored feedback of this home not yet expired."""
    from service.feedback.store import FeedbackBounds, FeedbackStore

    s = settings()
    return FeedbackStore(s.feedback_path).votes(FeedbackBounds.of(s))


def _line(item: QueueItem) -> str:
    confirmed = "yes" if item.confirmed else "no"
    return f"{item.keys:5d} {item.down_keys:5d} {item.not_covered_keys:12d} {item.up_keys:4d}  {confirmed:9s}  {item.query}"


def cmd_feedback_list(args: argparse.Namespace) -> int:
    """Print the review queue (a table, or with --json the body of GET /admin/feedback)."""
    from service.feedback.review import review_queue

    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    items = review_queue(_votes(), limit=args.limit)
    if args.json:
        print_json({"questions": [i.model_dump() for i in items]}, ensure_ascii=False)
        return 0
    print(f"{'keys':>5} {'down':>5} {'not-covered':>12} {'up':>4}  {'confirmed':9s}  question")
    for item in items:
        print(_line(item))
    return 0


def cmd_feedback_export(args: argparse.Namespace) -> int:
    """Write the labelled and the out-of-scope questions the feedback establishes; print how many of each."""
    from service.feedback.review import labels, write_queries

    min_keys = settings().feedback_min_keys if args.min_keys is None else args.min_keys
    if min_keys < 1:
        raise ValueError("--min-keys must be at least 1")
    out = Path(args.out)
    oos = Path(args.out_of_scope) if args.out_of_scope else out.with_name(f"{out.stem}_out_of_scope{out.suffix or '.jsonl'}")
    if oos.resolve() == out.resolve():
        raise ValueError("--out and --out-of-scope name the same file")
    found = labels(_votes(), min_keys)
    write_queries(out, found.queries)
    write_queries(oos, found.out_of_scope)
    summary = {"queries": len(found.queries), "out": str(out), "out_of_scope": len(found.out_of_scope), "out_of_scope_file": str(oos)}
    print_json({**summary, "min_keys": min_keys}, indent=None)
    return 0
