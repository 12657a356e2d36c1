"""``fedqa train router|retriever|abstention|answer``: train a model version (and activate it), or fit a decision."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli import train_ranking, train_reranker
from service.cli.common import print_json, settings
from service.cli.labels import add_lenient, labelled
from service.cli.options import ConfigOptions
from training.configs import RetrieverConfig, RouterConfig

if TYPE_CHECKING:
    from service.cli.common import Subparsers
    from training.bundle_fit import Questions

#: the options of ``train router`` and ``train retriever`` that are fields of their configs, in --help's order
ROUTER_OPTIONS = ConfigOptions(RouterConfig, ("epochs", "batch_size", "hidden", "synthetic_per_domain", "seed"))
RETRIEVER_OPTIONS = ConfigOptions(
    RetrieverConfig,
    (
        "epochs",
        "batch_size",
        "lr",
        "temperature",
        "max_seq_length",
        "negatives_per_query",
        "negative_margin",
        "dropout",
        "precision",
        "max_examples",
        "labelled_repeat",
        "seed",
        "checkpoint_every",
    ),
    rename={"negatives_per_query": "negatives"},
    unset=("dropout", "precision"),
)


def register(sub: Subparsers) -> None:
    """Add ``train router`` and ``train retriever`` to the parser."""
    s = sub.add_parser("train", help="train models")
    tsub = s.add_subparsers(dest="what", required=True)
    _register_router(tsub)
    _register_abstention(tsub)
    _register_answer(tsub)
    _register_split(tsub)
    _register_retriever(tsub)
    train_reranker.register(tsub)
    train_ranking.register(tsub)


def _register_router(tsub: Subparsers) -> None:
    t = tsub.add_parser("router", help="train the router (multi-label, BCE over domains), fit its split and 'not covered', then activate it")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--data", help="training set from 'fedqa data build' (labelled + synthetic + cross-domain)")
    src.add_argument(
        "--queries",
        help="labelled queries (queries.jsonl) only; the home's feedback is not read (fedqa feedback export writes it as one; fedqa refresh adds it)",
    )
    t.add_argument("--val-fraction", type=float, default=0.2, help="with --queries: share held out for validation")
    ROUTER_OPTIONS.add(t)
    t.add_argument("--no-activate", action="store_true", help="save the version without activating it")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    add_lenient(t)
    t.set_defaults(func=cmd_train_router)


def _register_abstention(tsub: Subparsers) -> None:
    t = tsub.add_parser("abstention", help="fit the 'not covered' decision for the active router (or index) version")
    t.add_argument("--queries", nargs="+", required=True, help="in-scope questions (the router's validation questions)")
    t.add_argument("--out-of-scope", required=True, help="questions the documentation does not answer (queries.jsonl format)")
    t.add_argument("--false-refusal", type=float, default=0.03, help="share of in-scope fitting questions refused")
    t.add_argument("--folds", type=int, default=5, help="k-fold for the held-out figures")
    t.add_argument("--seed", type=int, default=0, help="seed of the folds")
    t.add_argument("--dry-run", action="store_true", help="report the held-out figures without storing the model")
    add_lenient(t)
    t.set_defaults(func=cmd_train_abstention)


def _register_answer(tsub: Subparsers) -> None:
    t = tsub.add_parser("answer", help="fit the extractive-answer policy (how much to quote) for the active versions")
    t.add_argument("--queries", nargs="+", required=True, help="labelled training questions with reference answers (not the ones you report on)")
    t.add_argument("--top-k", type=int, default=5, help="ranking depth the policy may quote from")
    t.add_argument("--dry-run", action="store_true", help="print the fitted policy without storing it")
    add_lenient(t)
    t.set_defaults(func=cmd_train_answer)


def _register_split(tsub: Subparsers) -> None:
    t = tsub.add_parser("split", help="fit when an answer covers several products (answers by product) for the active router version")
    t.add_argument("--queries", nargs="+", required=True, help="labelled questions with gold passages (the router's validation questions)")
    t.add_argument("--top-k", type=int, default=5, help="ranking depth of each product's answer")
    t.add_argument("--dry-run", action="store_true", help="print the fitted rule and its figures without storing it")
    add_lenient(t)
    t.set_defaults(func=cmd_train_split)


def _register_retriever(tsub: Subparsers) -> None:
    t = tsub.add_parser("retriever", help="fine-tune the bi-encoder (symmetric InfoNCE) on a training set")
    t.add_argument("--data", required=True, help="training set from 'fedqa data build'")
    RETRIEVER_OPTIONS.add(t)
    t.add_argument("--base-model", help="sentence-transformers folder to start from (default: the configured or shipped MiniLM)")
    t.add_argument("--no-base-eval", action="store_true", help="skip evaluating the base model")
    t.add_argument("--resume", help="continue from a checkpoint folder (printed on Ctrl-C)")
    t.add_argument("--no-activate", action="store_true", help="save the version without activating it")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_train_retriever)


def _router_sets(args: argparse.Namespace, synthetic_cap: int | None) -> Questions:
    """Training and validation questions from ``--data`` (a built training set) or ``--queries`` (checked against the
    active index, before any model loads)."""
    from training.bundle_fit import Questions, router_sets_from_data
    from training.router_data import queries_fingerprint, stratified_split

    if args.data:
        from training.data.dataset import TrainingData

        return router_sets_from_data(TrainingData.load(args.data), synthetic_per_domain=synthetic_cap, seed=args.seed)
    if args.queries:
        train, val = stratified_split(labelled([args.queries], settings(), lenient=args.lenient), args.val_fraction, seed=args.seed)
        return Questions(train, val, [], queries_fingerprint(train))
    raise ValueError("give --data DIR (from 'fedqa data build') or --queries FILE")


def router_config(args: argparse.Namespace) -> RouterConfig:
    """``train router``'s options as a ``RouterConfig`` (``--synthetic-per-domain`` -1: all)."""
    values = ROUTER_OPTIONS.values(args)
    if values["synthetic_per_domain"] < 0:
        values["synthetic_per_domain"] = None
    return RouterConfig(**values)


def retriever_config(args: argparse.Namespace) -> RetrieverConfig:
    """``train retriever``'s options as a ``RetrieverConfig`` (``--max-examples`` 0: all; ``--negative-margin`` -1: keep all)."""
    values = RETRIEVER_OPTIONS.values(args)
    values["max_examples"] = values["max_examples"] or None
    if values["negative_margin"] < 0:
        values["negative_margin"] = None
    return RetrieverConfig(**values)


def cmd_train_router(args: argparse.Namespace) -> int:
    """Train a router head on the active index's retriever, fit calibration, fusion, the split and "not covered"
    against it, then activate it (all of it, or nothing); print its metrics."""
    from service.artifacts import Registry
    from training.bundle_fit import train_router_bundle
    from training.checkpoint import StopFlag

    config = router_config(args)
    sets = _router_sets(args, config.synthetic_per_domain)
    s = settings()
    with StopFlag().catch_sigint() as stop:
        fit = train_router_bundle(
            s,
            sets,
            config=config,
            progress=not args.quiet,
            activate=not args.no_activate,
            stop=stop,
            data_path=str(sets.data.path) if sets.data is not None else None,
        )
    registry = Registry(s.home_dir)
    manifest = registry.manifest("router", fit.version)
    metrics = manifest.get("metrics") or {}
    val_m = metrics.get("validation") or {}
    print_json(
        {
            "router": fit.version,
            "retriever": manifest.get("retriever"),
            "activated": not args.no_activate,
            "train_queries": manifest.get("train_queries"),
            "val_queries": len(sets.val),
            "held_out": metrics.get("held_out"),  # "validation", or "kfold" when the split was too small to fit on
            "warnings": metrics.get("warnings", []),
            "val_top1_accuracy": val_m.get("top1_accuracy"),
            "val_micro_f1": val_m.get("micro_f1"),
            "val_macro_f1": val_m.get("macro_f1"),
            "calibration": metrics.get("calibration"),
            "fusion": metrics.get("fusion"),
            "seconds": metrics.get("train_seconds"),
            "abstention": fit.abstention,
            "by_product": fit.split,
            "metrics": str(registry.path("router", fit.version) / "metrics.json"),
        },
        indent=None,
    )
    return 0


def cmd_train_abstention(args: argparse.Namespace) -> int:
    """Choose (or with --dry-run only measure) the "not covered" decision: the one fitted on the given questions, or the
    default when they are too few or it measures worse out of sample; print the verdict and the held-out figures."""
    from service.cli.labels import checked, index_catalogue, read_files
    from training.abstention import fit_not_covered

    if not 0.0 < args.false_refusal < 1.0 or args.folds < 2:
        raise ValueError(f"--false-refusal must lie in (0, 1) and --folds be 2 or more (given {args.false_refusal} and {args.folds})")
    s = settings()
    files = read_files(args.queries), read_files([args.out_of_scope])
    in_scope, out_of_scope = checked(files, index_catalogue(s), lenient=args.lenient)
    report = fit_not_covered(
        s, in_scope, out_of_scope, false_refusal=args.false_refusal, with_general=False, folds=args.folds, seed=args.seed, save=not args.dry_run
    )
    print_json({"abstention": report.path, "target_false_refusal": args.false_refusal, **report.summary()})
    return 0


def cmd_train_answer(args: argparse.Namespace) -> int:
    """Fit (or with --dry-run only show) the extractive-answer policy and its scores on the fitting questions."""
    from training.answer_policy import fit_answer_policy

    s = settings()
    queries = labelled(args.queries, s, lenient=args.lenient)
    if not any(q.answer for q in queries):
        raise ValueError(f'fitting the answer policy needs questions with reference answers ("answer"); {", ".join(args.queries)} give none')
    report = fit_answer_policy(s, queries, save=not args.dry_run, top_k=args.top_k)
    print_json({"answer_policy": report.path, "decision": report.policy.fit["decision"]["says"], **report.policy.to_json()})
    return 0


def cmd_train_split(args: argparse.Namespace) -> int:
    """Fit (or with --dry-run only show) when an answer covers several products, with its figures."""
    from training.split import fit_split

    s = settings()
    queries = labelled(args.queries, s, lenient=args.lenient)
    if not any(q.domains and q.gold_doc_ids for q in queries):
        raise ValueError(f'fitting the split needs questions with "domains" and "gold_doc_ids"; {", ".join(args.queries)} give none')
    report = fit_split(s, queries, save=not args.dry_run, top_k=args.top_k)
    print_json({"split": report.path, **report.report})
    return 0


def cmd_train_retriever(args: argparse.Namespace) -> int:
    """Fine-tune a retriever version on a built training set and print base vs fine-tuned metrics."""
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData
    from training.retriever import train_and_save

    config = retriever_config(args)
    data = TrainingData.load(args.data)
    with StopFlag().catch_sigint() as stop:
        version, metrics = train_and_save(
            settings(),
            data,
            config=config,
            base_model=args.base_model,
            activate=not args.no_activate,
            evaluate_base=not args.no_base_eval,
            progress=not args.quiet,
            stop=stop,
            resume=Path(args.resume) if args.resume else None,
        )
    print_json({"retriever": version, "activated": not args.no_activate, **metrics})
    if not args.no_activate:
        print(f"next: 'fedqa index build' re-embeds the corpus with {version}; then POST /admin/reload", file=sys.stderr)
    return 0
