"""``fedqa`` command line: thin wrappers over the functions the API uses."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from service.config import Settings, get_settings


def _settings() -> Settings:
    return get_settings()


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app

    settings = _settings()
    if args.demo:
        from service.demo import setup_demo

        for line in setup_demo(settings):
            logging.getLogger("fedqa").info(line)
    uvicorn.run(create_app(settings), host=args.host or settings.host, port=args.port or settings.port, log_level="info")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from service.demo import setup_demo

    done = setup_demo(_settings())
    print("\n".join(done) or "the demo is already set up in this home")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from indexes.ingest import ingest

    report = ingest([Path(p) for p in args.paths], _settings(), domain=args.domain, progress=not args.quiet)
    print(
        json.dumps(
            {
                "index": report.version,
                "new_version": report.changed,
                "added": report.added,
                "updated": report.updated,
                "unchanged": report.unchanged,
                "duplicates_dropped": report.duplicates,
                "domains": report.domains,
                "seconds": round(report.seconds, 1),
            },
            indent=2,
        )
    )
    return 0


def cmd_train_router(args: argparse.Namespace) -> int:
    from service.queries import load_queries
    from training.router import train_and_activate

    queries = load_queries(args.queries)
    version = train_and_activate(_settings(), queries, epochs=args.epochs, progress=not args.quiet)
    print(json.dumps({"router": version, "train_queries": len(queries)}))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from service.schemas import AskRequest

    body = {"query": args.query, "generate": not args.no_generate}
    if args.top_k is not None:
        body["top_k"] = args.top_k
    if args.seed is not None:
        body["seed"] = args.seed
    if args.strategy:
        body["strategy"] = args.strategy
    if args.url:
        import httpx

        r = httpx.post(args.url.rstrip("/") + "/ask", json=body, timeout=120)
        print(json.dumps(r.json(), indent=2, ensure_ascii=False))
        return 0 if r.status_code == 200 else 1
    from service.pipeline import load_pipeline

    pipeline = load_pipeline(_settings(), with_llm=not args.no_generate)
    try:
        resp = pipeline.answer(AskRequest(**body))
    finally:
        pipeline.close()
    print(json.dumps(resp.model_dump(), indent=2, ensure_ascii=False))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from service.evaluation.runner import evaluate_cli

    return evaluate_cli(args, _settings())


def cmd_domains(args: argparse.Namespace) -> int:
    from service.artifacts import Registry

    reg = Registry(_settings().home_dir)
    active = reg.active()
    manifest = reg.active_manifest("index") or {}
    print(json.dumps({"home": str(reg.home), "active": active, "domains": manifest.get("domains", {})}, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fedqa``."""
    p = argparse.ArgumentParser(prog="fedqa", description="Federated multi-product question answering (MKP-QA).")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the HTTP service")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--demo", action="store_true", help="set up the shipped demo first if this home has no index")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("demo", help="ingest the demo knowledge base and train its router (if not done)")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("ingest", help="add documents (docs.jsonl, or folders of .md/.html/.txt pages)")
    s.add_argument("paths", nargs="+")
    s.add_argument("--domain", help="domain of the pages (when PATH is one domain's folder or page)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("train", help="train models")
    tsub = s.add_subparsers(dest="what", required=True)
    t = tsub.add_parser("router", help="train the router on labelled queries (queries.jsonl)")
    t.add_argument("--queries", required=True)
    t.add_argument("--epochs", type=int, default=8)
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_train_router)

    s = sub.add_parser("ask", help="answer a question (in-process, or through a running service with --url)")
    s.add_argument("query")
    s.add_argument("--top-k", type=int)
    s.add_argument("--seed", type=int)
    s.add_argument("--no-generate", action="store_true", help="ranking only")
    s.add_argument("--strategy", choices=["mkpqa", "uis", "rfs", "lfs"], help="retrieval strategy (default mkpqa)")
    s.add_argument("--url", help="ask a running service, e.g. http://127.0.0.1:8000")
    s.set_defaults(func=cmd_ask)

    s = sub.add_parser("evaluate", help="evaluate strategies on labelled questions (summary.json, results.jsonl, report.html)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--queries", nargs="+", metavar="FILE",
                     help="queries.jsonl files (qid, query, domains, gold_doc_ids, answer), e.g. a uni and a cross set")
    src.add_argument("--dataset", help="a dataset name: demo, or NAME in $FEDQA_HOME/eval/datasets/NAME.jsonl")
    src.add_argument("--resume", metavar="JOB", help="finish an interrupted job of this home")
    s.add_argument("--strategies", default="mkpqa,uis,rfs", help="comma-separated: mkpqa,uis,rfs,lfs")
    s.add_argument("--metrics", default="retrieval", help="comma-separated: retrieval,answer,wixqa,rageval,ragxplain")
    s.add_argument("--top-k", type=int, default=5)
    s.add_argument("--gate", choices=["deterministic", "stochastic"], default="deterministic")
    s.add_argument("--seed", type=int, help="stochastic gate: question i uses seed + i")
    s.add_argument("--limit", type=int, help="only the first N questions")
    s.add_argument("--out", help="folder for summary.json, results.jsonl and report.html")
    s.add_argument("--dry-run", action="store_true", help="only count the LLM calls the job would make")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("domains", help="show the active versions and domains of this home")
    s.set_defaults(func=cmd_domains)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fedqa`` command."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; the active versions are unchanged", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"fedqa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
