"""``fedqa train ranking``: the ranking model (one linear score over named features) fitted for the active versions."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings
from service.cli.labels import add_lenient, labelled
from service.ranking.features import DEPTH
from service.ranking.model import FOLDS, OBJECTIVE, Objective

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(tsub: Subparsers) -> None:
    """Add ``train ranking`` to the ``train`` subcommands."""
    t = tsub.add_parser(
        "ranking",
        help="fit the ranking model (a linear score over each candidate's named features) for the active router version; "
        "it serves only when its cross-fitted Acc@1 is no lower than the default ranking's",
    )
    t.add_argument("--queries", nargs="+", required=True, help="labelled questions with gold passages (the router's validation questions)")
    t.add_argument("--depth", type=int, default=DEPTH, help="candidates per searched product from the dense and from the lexical search")
    t.add_argument(
        "--rerank-depth",
        type=int,
        default=None,
        help="with a reranker, its logit is a feature of each pool's top N by the default ranking (default: FEDQA_RANK_RERANK_DEPTH)",
    )
    t.add_argument("--folds", type=int, default=FOLDS, help="folds of the guard's cross-fit")
    t.add_argument("--seed", type=int, default=0, help="seed of the guard's folds")
    t.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        default=OBJECTIVE.value,
        help="pairwise: a logistic regression on (gold - other) feature differences; softmax: the gold passages' share of each pool",
    )
    t.add_argument("--dry-run", action="store_true", help="print the fitted model and its figures without storing it")
    add_lenient(t)
    t.set_defaults(func=cmd_train_ranking)


def cmd_train_ranking(args: argparse.Namespace) -> int:
    """Fit (or with --dry-run only show) the ranking model, with its out-of-fold figures."""
    from training.ranking import fit_ranking, report

    s = settings()
    queries = labelled(args.queries, s, lenient=args.lenient)
    if not any(q.domains and q.gold_doc_ids for q in queries):
        raise ValueError(f'fitting the ranking model needs questions with "domains" and "gold_doc_ids"; {", ".join(args.queries)} give none')
    fit = fit_ranking(
        s,
        queries,
        save=not args.dry_run,
        depth=args.depth,
        folds=args.folds,
        seed=args.seed,
        objective=Objective(args.objective),
        rerank_depth=args.rerank_depth,
    )
    print_json(report(fit))
    return 0
