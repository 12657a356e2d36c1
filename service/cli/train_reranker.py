"""``fedqa train reranker``: a cross-encoder trained on the active index's rankings, its combination fitted, activated."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings
from training.precision import TrainingPrecision

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(tsub: Subparsers) -> None:
    """Add ``train reranker`` to the ``train`` subcommands."""
    t = tsub.add_parser(
        "reranker",
        help="train the reranker (a cross-encoder from the shipped MiniLM) on the active index's rankings; run after 'fedqa index build'",
    )
    t.add_argument("--data", required=True, help="training set from 'fedqa data build' (its validation questions fit the combination)")
    t.add_argument("--steps", type=int, default=200, help="optimisation steps")
    t.add_argument("--batch-size", type=int, default=8, help="in-scope questions per step")
    t.add_argument("--negatives", type=int, default=3, help="hard negatives per question, from its ranking")
    t.add_argument("--oos-per-step", type=int, default=2, help="out-of-scope questions per step (every candidate negative)")
    t.add_argument("--depth", type=int, default=20, help="ranking depth the negatives are drawn from")
    t.add_argument("--max-length", type=int, default=None, help="tokens of a question and passage, trained and served (default: RerankerConfig's)")
    t.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    t.add_argument("--layers", type=int, default=None, help="transformer layers kept from the MiniLM's six (default: RerankerConfig's)")
    t.add_argument(
        "--titles",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the model reads each passage's title (page > section) before its text (default: RerankerConfig's)",
    )
    t.add_argument(
        "--dropout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the MiniLM's dropout while training (default: RerankerConfig's)",
    )
    t.add_argument(
        "--precision",
        choices=[p.value for p in TrainingPrecision],
        default=None,
        help="a training step's arithmetic: bf16 autocast, fp32, or auto (bf16 where the CPU has AMX tiles; default: RerankerConfig's)",
    )
    t.add_argument("--labelled-repeat", type=int, default=3, help="times each expert question is used before synthetic ones")
    t.add_argument("--max-questions", type=int, default=1600, help="training questions (expert ones first, then synthetic)")
    t.add_argument("--seed", type=int, default=0, help="seed of the sampling and the training")
    t.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    t.add_argument("--resume", help="continue from a checkpoint folder (printed on Ctrl-C)")
    t.add_argument("--no-activate", action="store_true", help="save the version without activating it")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_train_reranker)


def cmd_train_reranker(args: argparse.Namespace) -> int:
    """Train, fit and save a reranker version; print its figures."""
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData
    from training.reranker import RerankerConfig
    from training.reranker_version import train_and_save

    config = RerankerConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        negatives=args.negatives,
        oos_per_step=args.oos_per_step,
        depth=args.depth,
        lr=args.lr,
        labelled_repeat=args.labelled_repeat,
        max_questions=args.max_questions,
        seed=args.seed,
        checkpoint_every=args.checkpoint_every,
    )
    if args.titles is not None:
        config = replace(config, titles=args.titles)
    if args.max_length is not None:
        config = replace(config, max_length=args.max_length)
    if args.layers is not None:
        config = replace(config, layers=args.layers)
    if args.dropout is not None:
        config = replace(config, dropout=args.dropout)
    if args.precision is not None:
        config = replace(config, precision=TrainingPrecision(args.precision))
    data = TrainingData.load(args.data)
    with StopFlag().catch_sigint() as stop:
        resume = Path(args.resume) if args.resume else None
        activate, progress = not args.no_activate, not args.quiet
        version, metrics = train_and_save(settings(), data, config=config, activate=activate, progress=progress, stop=stop, resume=resume)
    print_json({"reranker": version, "activated": not args.no_activate, **metrics})
    if not args.no_activate:
        print("next: 'fedqa train router --data DIR' (its 'not covered' fit reads the reranked evidence); then POST /admin/reload", file=sys.stderr)
    return 0
