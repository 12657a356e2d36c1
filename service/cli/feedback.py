"""``fedqa feedback list|export|confirm``: the curators' review queue of the feedback callers sent (``POST /feedback``),
the labelled questions it establishes (a running service serves them after its next feedback, reload or restart;
``fedqa refresh`` fits on them),
and a curator's verdict on a question (the passages that answer it, or "not covered"), stored as trusted feedback."""

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
    t = fsub.add_parser(
        "confirm", help="a curator's verdict on a question: the passages that answer it (--doc-id) or --not-covered, stored as trusted feedback"
    )
    which = t.add_mutually_exclusive_group(required=True)
    which.add_argument("--query", help="the question (as asked)")
    which.add_argument("--id", help="a question's id from 'fedqa feedback list' (feedback-...)")
    verdict = t.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--doc-id", action="append", dest="doc_ids", metavar="DOC_ID", help="a passage that answers it (repeat for several)")
    verdict.add_argument("--not-covered", action="store_true", help="the documentation does not answer it")
    t.add_argument("--curator", default="cli", help="the name the verdict is stored under, after 'cli:' (default: cli:cli)")
    t.add_argument("--comment", help="free text for the other curators")
    t.set_defaults(func=cmd_feedback_confirm)


def _votes() -> list[StoredVote]:
    """The stored feedback of this home not yet expired."""
    from service.feedback.store import FeedbackBounds, FeedbackStore

    s = settings()
    return FeedbackStore(s.feedback_path).votes(FeedbackBounds.of(s))


def _line(item: QueueItem) -> str:
    confirmed = "yes" if item.confirmed else "no"
    return f"{item.id:21s} {item.keys:5d} {item.down_keys:5d} {item.not_covered_keys:12d} {item.up_keys:4d}  {confirmed:9s}  {item.query}"


def cmd_feedback_list(args: argparse.Namespace) -> int:
    """Print the review queue (a table, or with --json the body of GET /admin/feedback)."""
    from service.feedback.review import review_queue

    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    items = review_queue(_votes(), limit=args.limit)
    if args.json:
        print_json({"questions": [i.model_dump() for i in items]}, ensure_ascii=False)
        return 0
    print(f"{'id':21s} {'keys':>5} {'down':>5} {'not-covered':>12} {'up':>4}  {'confirmed':9s}  question")
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


def cmd_feedback_confirm(args: argparse.Namespace) -> int:
    """Store a curator's verdict on a question (replacing this curator's earlier word on it); print it as JSON."""
    from service.artifacts import Registry
    from service.feedback.review import confirmation, question_id, question_of
    from service.feedback.store import FeedbackBounds, FeedbackStore, normalise
    from training.data.corpus import index_corpus

    s = settings()
    query = args.query.strip() if args.query is not None else question_of(_votes(), args.id)
    if not query:
        raise ValueError(f"no question of the stored feedback has the id {args.id!r} (see fedqa feedback list)" if args.id else "--query is empty")
    if len(query) > s.max_query_chars:
        raise ValueError(f"the question is {len(query)} characters; the limit is {s.max_query_chars} (FEDQA_MAX_QUERY_CHARS)")
    passages: dict[str, str] = {}
    version = Registry(s.home_dir).active()["index"]
    if args.doc_ids:
        products = {p.doc_id: p.domain for p in index_corpus(s, version)}  # raises without an index
        unknown = [d for d in args.doc_ids if d not in products]
        if unknown:
            raise ValueError(f"no passage of the index has the doc_id {', '.join(map(repr, unknown))}")
        passages = {d: products[d] for d in dict.fromkeys(args.doc_ids)}
    votes = confirmation(
        query, passages, not_covered=args.not_covered, curator=f"cli:{args.curator}", key_products=None, index_version=version, comment=args.comment
    )
    rows = FeedbackStore(s.feedback_path).confirm(votes, FeedbackBounds.of(s))
    out = {"id": question_id(normalise(query)), "query": query, "doc_ids": list(passages), "not_covered": args.not_covered, "rows": rows}
    print_json(out, indent=None, ensure_ascii=False)
    return 0
