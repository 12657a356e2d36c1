"""``fedqa data build``: router and retriever training sets from a corpus and labelled queries."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.common import print_json, settings
from service.cli.labels import add_lenient, checked, corpus_catalogue, read_files
from service.config import Settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers
    from training.data.relevance import LLMRelevanceJudge
    from training.data.synthetic import QueryGenerator


def register(sub: Subparsers) -> None:
    """Add ``data build`` to the parser."""
    s = sub.add_parser("data", help="training data")
    dsub = s.add_subparsers(dest="what", required=True)
    t = dsub.add_parser("build", help="router and retriever training sets from a corpus and labelled queries")
    t.add_argument("--corpus", nargs="+", help="docs.jsonl or folders of pages (default: the active index's passages)")
    t.add_argument("--domain", help="domain of the pages (when a corpus path is one domain's folder)")
    t.add_argument("--queries", nargs="*", default=[], help="labelled queries (queries.jsonl format), e.g. queries_dev.jsonl cross_dev.jsonl")
    t.add_argument(
        "--out-of-scope",
        nargs="*",
        default=[],
        metavar="FILE",
        help="questions no domain answers (queries.jsonl format, domains []), e.g. oos_dev.jsonl: router rows with every domain 0, part held out",
    )
    t.add_argument("--router-synthetic-per-domain", type=int, default=2000, help="passages per domain given heuristic router-only questions")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--val-fraction", type=float, default=0.3, help="share of labelled queries held out (per domain, by qid)")
    t.add_argument("--seed", type=int, default=0, help="seed of the split, the synthetic questions and the negatives")
    t.add_argument(
        "--val-complement",
        action="store_true",
        help="hold out the labelled queries the same --seed and --val-fraction would train on (the other fold: two builds score every question once)",
    )
    t.add_argument("--generator", choices=["heuristic", "llm", "both"], default="heuristic", help="synthetic query generator(s)")
    t.add_argument("--synthetic-per-domain", type=int, default=300, help="passages per domain given synthetic queries")
    t.add_argument("--llm-per-domain", type=int, default=50, help="of those, how many per domain the LLM writes for")
    t.add_argument("--negatives", type=int, default=3, help="hard negatives per query")
    t.add_argument("--cross", type=int, default=100, help="cross-domain questions joined from labelled ones")
    t.add_argument("--pool-random", type=int, default=2000, help="random passages in the validation candidate pool")
    t.add_argument("--label-relevance", action="store_true", help="LLM relevance labels (paper's annotation prompt)")
    t.add_argument("--label-limit", type=int, default=500, help="most query-passage pairs to label")
    t.add_argument("--force", action="store_true", help="replace --out if it exists")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    add_lenient(t)
    t.set_defaults(func=cmd_data_build)


def _generators(args: argparse.Namespace, s: Settings) -> tuple[list[QueryGenerator], LLMRelevanceJudge | None]:
    """The synthetic query generators ``--generator`` asks for, and the relevance judge of ``--label-relevance``."""
    from training.data.synthetic import HeuristicQueryGenerator, LLMQueryGenerator

    generators: list[QueryGenerator] = []
    judge: LLMRelevanceJudge | None = None
    if args.generator in ("heuristic", "both"):
        generators.append(HeuristicQueryGenerator())
    if args.generator in ("llm", "both") or args.label_relevance:
        from service.generation.backends import open_llm

        llm = open_llm(s)
        if llm is None:
            raise ValueError(
                "the LLM generator and relevance labels need an LLM: set FEDQA_LLM_BASE_URL, "
                "or FEDQA_LLM_BACKEND=transformers|llamacpp for the embedded one"
            )
        if args.generator in ("llm", "both"):
            generators.append(LLMQueryGenerator(llm, timeout_s=s.llm_timeout_s))
        if args.label_relevance:
            from training.data.relevance import LLMRelevanceJudge

            judge = LLMRelevanceJudge(llm, timeout_s=s.llm_timeout_s)
    return generators, judge


def cmd_data_build(args: argparse.Namespace) -> int:
    """Build a training-set folder and print its counts and fingerprint. The files and the labels they name are
    checked (against the corpus) before an LLM opens."""
    from training.data.build import DataConfig, build_training_data
    from training.data.corpus import index_corpus, load_corpus

    s = settings()
    if Path(args.out).exists() and not args.force:
        raise FileExistsError(f"{args.out} exists (pass --force to replace it)")
    queries, out_of_scope = read_files(args.queries), read_files(args.out_of_scope or [])
    if args.corpus:
        corpus = load_corpus([Path(p) for p in args.corpus], s, domain=args.domain)
        sources, catalogue = list(args.corpus), corpus_catalogue(corpus)
    else:
        corpus = index_corpus(s)
        sources, catalogue = ["active index"], corpus_catalogue(corpus, "the index")
    queries, out_of_scope = checked([queries, out_of_scope], catalogue, lenient=args.lenient)
    generators, judge = _generators(args, s)
    config = DataConfig(
        val_fraction=args.val_fraction,
        seed=args.seed,
        val_complement=args.val_complement,
        synthetic_per_domain=args.synthetic_per_domain,
        negatives=args.negatives,
        cross_examples=args.cross,
        pool_random=args.pool_random,
        llm_per_domain=args.llm_per_domain,
        label_relevance=args.label_relevance,
        label_limit=args.label_limit,
        router_synthetic_per_domain=args.router_synthetic_per_domain,
    )
    report = build_training_data(
        corpus,
        queries,
        Path(args.out),
        generators=generators,
        config=config,
        judge=judge,
        sources=sources,
        overwrite=args.force,
        progress=not args.quiet,
        out_of_scope=out_of_scope,
    )
    print_json({"out": str(report.out), "fingerprint": report.fingerprint, "seconds": round(report.seconds, 1), **report.counts})
    return 0
