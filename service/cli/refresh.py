"""``fedqa refresh``: every fitted part of the home in serving order, activated together (training/refresh.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from service.cli.common import settings
from service.cli.labels import add_lenient

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``refresh`` to the parser."""
    s = sub.add_parser(
        "refresh",
        help="fit every part (data build, retriever, index, router, reranker, ranking model, answer policy, split, 'not covered') "
        "and activate them together",
    )
    s.add_argument(
        "--corpus",
        nargs="+",
        default=[],
        help="docs.jsonl or folders of pages: build a training set, fine-tune the retriever and re-embed the index (omit: router and decisions only)",
    )
    s.add_argument("--queries", nargs="+", default=[], help="labelled questions (queries.jsonl format; reference answers fit the answer policy)")
    s.add_argument("--out-of-scope", nargs="+", default=[], metavar="FILE", help="questions the documentation does not answer (domains [])")
    s.add_argument("--reranker", action="store_true", help="also train the cross-encoder reranker (with --corpus; minutes)")
    s.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="share of the labelled questions held out for the router's fits (default: 0.3 with --corpus, as data build; else 0.2, as train router)",
    )
    s.add_argument("--epochs", type=int, default=None, help="the router's passes over its training questions (default: train router's)")
    s.add_argument("--seed", type=int, default=0, help="seed of the split, the sampling and the training")
    s.add_argument(
        "--no-feedback",
        dest="feedback",
        action="store_false",
        help="leave out the home's feedback (default: passages it confirms and questions it marks not covered join --queries, --out-of-scope)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress bars (each stage still says a line)")
    add_lenient(s)
    s.set_defaults(func=cmd_refresh)


def cmd_refresh(args: argparse.Namespace) -> int:
    """Run the refresh, a line per stage on stderr, then the summary table and the bundle activated on stdout."""
    from training.checkpoint import StopFlag
    from training.refresh import RefreshInputs, RefreshOptions, refresh

    inputs = RefreshInputs(tuple(args.corpus), tuple(args.queries), tuple(args.out_of_scope))
    options = RefreshOptions(
        reranker=args.reranker,
        val_fraction=args.val_fraction,
        seed=args.seed,
        router_epochs=args.epochs,
        progress=not args.quiet,
        lenient=args.lenient,
        feedback=args.feedback,
    )
    with StopFlag().catch_sigint() as stop:
        report = refresh(settings(), inputs, options, say=lambda line: print(line, file=sys.stderr, flush=True), stop=stop)
    print(report.table())
    print(report.feedback.says())
    bundle = ", ".join(f"{k} {v}" for k, v in report.bundle.as_dict().items() if v)
    changed = ", ".join(report.activated) or "nothing (every stage unchanged)"
    print(f"activated together: {changed}; serving: {bundle} ({report.seconds:.0f} s)")
    print("a running service picks it up on POST /admin/reload", file=sys.stderr)
    return 0
