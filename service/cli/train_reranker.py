"""``fedqa train reranker``: a cross-encoder trained on the active index's rankings, its combination fitted, activated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings
from service.cli.options import ConfigOptions
from training.configs import RerankerConfig

if TYPE_CHECKING:
    from service.cli.common import Subparsers

#: every option but --data, --resume, --no-activate and --quiet is a ``RerankerConfig`` field, in --help's order
RERANKER_OPTIONS = ConfigOptions(
    RerankerConfig,
    (
        "steps",
        "batch_size",
        "negatives",
        "oos_per_step",
        "depth",
        "max_length",
        "lr",
        "layers",
        "titles",
        "dropout",
        "precision",
        "labelled_repeat",
        "max_questions",
        "seed",
        "checkpoint_every",
    ),
    unset=("max_length", "layers", "titles", "dropout", "precision"),
)


def register(tsub: Subparsers) -> None:
    """Add ``train reranker`` to the ``train`` subcommands."""
    t = tsub.add_parser(
        "reranker",
        help="train the reranker (a cross-encoder from the shipped MiniLM) on the active index's rankings; run after 'fedqa index build'",
    )
    t.add_argument("--data", required=True, help="training set from 'fedqa data build' (its validation questions fit the combination)")
    RERANKER_OPTIONS.add(t)
    t.add_argument("--resume", help="continue from a checkpoint folder (printed on Ctrl-C)")
    t.add_argument("--no-activate", action="store_true", help="save the version without activating it")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_train_reranker)


def cmd_train_reranker(args: argparse.Namespace) -> int:
    """Train, fit and save a reranker version; print its figures."""
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData
    from training.reranker_version import train_and_save

    config = RerankerConfig(**RERANKER_OPTIONS.values(args))
    data = TrainingData.load(args.data)
    with StopFlag().catch_sigint() as stop:
        resume = Path(args.resume) if args.resume else None
        activate, progress = not args.no_activate, not args.quiet
        version, metrics = train_and_save(settings(), data, config=config, activate=activate, progress=progress, stop=stop, resume=resume)
    print_json({"reranker": version, "activated": not args.no_activate, **metrics})
    if not args.no_activate:
        print("next: 'fedqa train router --data DIR' (its 'not covered' fit reads the reranked evidence); then POST /admin/reload", file=sys.stderr)
    return 0
