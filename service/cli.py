"""``fedqa`` command line: thin wrappers over the functions the API uses."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from service.config import Settings, get_settings
from training.checkpoint import TrainingInterrupted


def _settings() -> Settings:
    return get_settings()


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app

    from service.logs import configure_logging

    settings = _settings()
    configure_logging(settings.log_format, settings.log_level, secrets=_secrets(settings))
    if args.demo:
        from service.demo import setup_demo

        for line in setup_demo(settings):
            logging.getLogger("fedqa").info(line)
    uvicorn.run(
        create_app(settings),
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_config=None,  # logging is configured above (JSON lines); uvicorn's access log is replaced by fedqa.access
        access_log=False,
    )
    return 0


def _secrets(settings: Settings) -> list[str]:
    """Every configured secret, for the log's redaction filter."""
    out = list(settings.api_key_set())
    for secret in (settings.admin_key, settings.llm_api_key, settings.qdrant_api_key):
        if secret is not None and secret.get_secret_value():
            out.append(secret.get_secret_value())
    return out


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
    from training.checkpoint import StopFlag
    from training.router import router_queries_from_data, stratified_split, train_and_activate

    data_fp, data_path, domains = None, None, None
    if args.data:
        from training.data.dataset import TrainingData

        data = TrainingData.load(args.data)
        synthetic = args.synthetic_per_domain if args.synthetic_per_domain >= 0 else None
        train = router_queries_from_data(data, labelled_repeat=args.labelled_repeat, synthetic_per_domain=synthetic, seed=args.seed)
        val = data.val
        data_fp, data_path, domains = data.fingerprint, str(data.path), data.domains
    elif args.queries:
        train, val = stratified_split(load_queries(args.queries), args.val_fraction, seed=args.seed)
    else:
        raise ValueError("give --data DIR (from 'fedqa data build') or --queries FILE")
    settings = _settings()
    with StopFlag().catch_sigint() as stop:
        version = train_and_activate(
            settings, train, epochs=args.epochs, progress=not args.quiet, activate=not args.no_activate, val=val,
            data_fingerprint=data_fp, data_path=data_path, domains=domains, batch_size=args.batch_size, seed=args.seed,
            stop=stop, resume=Path(args.resume) if args.resume else None,
        )
    from service.artifacts import Registry

    manifest = Registry(settings.home_dir).manifest("router", version)
    val_m = (manifest.get("metrics") or {}).get("validation") or {}
    print(
        json.dumps(
            {
                "router": version,
                "activated": not args.no_activate,
                "train_queries": len(train),
                "val_queries": len(val),
                "val_top1_accuracy": val_m.get("top1_accuracy"),
                "val_micro_f1": val_m.get("micro_f1"),
                "val_macro_f1": val_m.get("macro_f1"),
                "val_ece": val_m.get("ece"),
                "metrics": str(Registry(settings.home_dir).path("router", version) / "metrics.json"),
            }
        )
    )
    return 0


def cmd_train_abstention(args: argparse.Namespace) -> int:
    from service.queries import load_queries
    from training.abstention import fit_abstention

    in_scope = [q for f in args.queries for q in load_queries(f)]
    report = fit_abstention(_settings(), in_scope, load_queries(args.out_of_scope), false_refusal=args.false_refusal,
                            folds=args.folds, seed=args.seed, save=not args.dry_run)
    heldout = {k: v for k, v in report.heldout.items() if k != "per_fold"}
    print(json.dumps({"abstention": report.path, "threshold": report.model.threshold,
                      "target_false_refusal": args.false_refusal, "heldout": heldout}, indent=2))
    return 0


def cmd_train_retriever(args: argparse.Namespace) -> int:
    from training.checkpoint import StopFlag
    from training.data.dataset import TrainingData
    from training.retriever import RetrieverConfig, train_and_save

    config = RetrieverConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, temperature=args.temperature,
        max_seq_length=args.max_seq_length, negatives_per_query=args.negatives, max_examples=args.max_examples or None,
        labelled_repeat=args.labelled_repeat, seed=args.seed, checkpoint_every=args.checkpoint_every,
    )
    data = TrainingData.load(args.data)
    with StopFlag().catch_sigint() as stop:
        version, metrics = train_and_save(
            _settings(), data, config=config, base_model=args.base_model, activate=not args.no_activate,
            evaluate_base=not args.no_base_eval, progress=not args.quiet, stop=stop,
            resume=Path(args.resume) if args.resume else None,
        )
    print(json.dumps({"retriever": version, "activated": not args.no_activate, **metrics}, indent=2))
    if not args.no_activate:
        print(f"next: 'fedqa index build' re-embeds the corpus with {version}; then POST /admin/reload", file=sys.stderr)
    return 0


def cmd_data_build(args: argparse.Namespace) -> int:
    from service.queries import load_queries
    from training.data.build import DataConfig, build_training_data
    from training.data.corpus import index_corpus, load_corpus
    from training.data.synthetic import HeuristicQueryGenerator, LLMQueryGenerator

    settings = _settings()
    if args.corpus:
        corpus = load_corpus([Path(p) for p in args.corpus], settings, domain=args.domain)
        sources = list(args.corpus)
    else:
        corpus = index_corpus(settings)
        sources = ["active index"]
    queries = [q for f in args.queries for q in load_queries(f)]
    generators: list = []
    judge = None
    if args.generator in ("heuristic", "both"):
        generators.append(HeuristicQueryGenerator())
    if args.generator in ("llm", "both") or args.label_relevance:
        from service.generation.backends import open_llm

        llm = open_llm(settings)
        if llm is None:
            raise ValueError("the LLM generator and relevance labels need an LLM: set FEDQA_LLM_BASE_URL, or FEDQA_LLM_BACKEND=transformers|llamacpp for the embedded one")
        if args.generator in ("llm", "both"):
            generators.append(LLMQueryGenerator(llm, timeout_s=settings.llm_timeout_s))
        if args.label_relevance:
            from training.data.relevance import LLMRelevanceJudge

            judge = LLMRelevanceJudge(llm, timeout_s=settings.llm_timeout_s)
    config = DataConfig(
        val_fraction=args.val_fraction, seed=args.seed, synthetic_per_domain=args.synthetic_per_domain,
        negatives=args.negatives, cross_examples=args.cross, pool_random=args.pool_random,
        llm_per_domain=args.llm_per_domain, label_relevance=args.label_relevance, label_limit=args.label_limit,
    )
    report = build_training_data(
        corpus, queries, Path(args.out), generators=generators, config=config, judge=judge, sources=sources,
        overwrite=args.force, progress=not args.quiet,
    )
    print(json.dumps({"out": str(report.out), "fingerprint": report.fingerprint, "seconds": round(report.seconds, 1), **report.counts}, indent=2))
    return 0


def cmd_index_build(args: argparse.Namespace) -> int:
    from indexes.rebuild import rebuild_index

    report = rebuild_index(_settings(), retriever=args.retriever, activate=not args.no_activate, progress=not args.quiet)
    print(
        json.dumps(
            {
                "index": report.version,
                "activated": not args.no_activate,
                "passages": sum(report.domains.values()),
                "domains": report.domains,
                "seconds": round(report.seconds, 1),
            },
            indent=2,
        )
    )
    return 0


def _kind_of(version: str) -> str:
    from service.artifacts import KINDS

    kind = version.split("-", 1)[0]
    if kind not in KINDS:
        raise ValueError(f"cannot tell the kind of {version!r}: versions are named <index|router|retriever>-...")
    return kind


def cmd_models_list(args: argparse.Namespace) -> int:
    from service.artifacts import KINDS, Registry

    reg = Registry(_settings().home_dir)
    out = {}
    for kind in [args.kind] if args.kind else KINDS:
        rows = []
        for v in reg.list(kind):
            m = v.manifest
            row = {"version": v.version, "active": v.active, "created": m.get("created")}
            if kind == "index":
                row.update(retriever=m.get("retriever"), passages=m.get("passages"))
            elif kind == "router":
                row.update(val_top1_accuracy=m.get("val_top1_accuracy"), data_fingerprint=(m.get("data_fingerprint") or "")[:12])
            else:
                metrics = m.get("metrics") or {}
                row.update(
                    base_acc1=(metrics.get("base") or {}).get("acc@1"),
                    fine_tuned_acc1=(metrics.get("fine_tuned") or {}).get("acc@1"),
                    data_fingerprint=(m.get("data_fingerprint") or "")[:12],
                )
            rows.append(row)
        out[kind] = rows
    print(json.dumps({"home": str(reg.home), "active": reg.active(), "versions": out}, indent=2))
    return 0


def cmd_models_activate(args: argparse.Namespace) -> int:
    from service.artifacts import Registry

    reg = Registry(_settings().home_dir)
    kind = _kind_of(args.version)
    reg.activate(kind, args.version)  # type: ignore[arg-type]
    print(json.dumps({"activated": args.version, "kind": kind, "active": reg.active()}))
    if kind == "retriever":
        print(f"the service keeps its index's encoder until 'fedqa index build' re-embeds with {args.version}", file=sys.stderr)
    return 0


def cmd_models_rollback(args: argparse.Namespace) -> int:
    from service.artifacts import Registry

    reg = Registry(_settings().home_dir)
    version = reg.rollback(args.kind)
    print(json.dumps({"rolled_back_to": version, "kind": args.kind, "active": reg.active()}))
    return 0


def cmd_models_evaluate(args: argparse.Namespace) -> int:
    from service.queries import load_queries
    from training.evaluate import evaluate_index

    queries = [q for f in args.queries for q in load_queries(f)]
    print(json.dumps(evaluate_index(_settings(), queries, version=args.index), indent=2))
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


def _quiet_threads() -> None:
    """Torch threads for long CPU jobs: FEDQA_TORCH_THREADS, and OpenMP threads that sleep when idle.

    Spinning OpenMP threads slow training many times over on a small machine that other work
    shares; passive waiting costs little when the machine is quiet. Takes effect only when torch
    is not imported yet (it is imported lazily by these commands).
    """
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from service.compute import configure_threads

    configure_threads(_settings().torch_threads)


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
    t = tsub.add_parser("router", help="train the router (multi-label, BCE over domains) and activate it")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--data", help="training set from 'fedqa data build' (labelled + synthetic + cross-domain)")
    src.add_argument("--queries", help="labelled queries (queries.jsonl) only")
    t.add_argument("--val-fraction", type=float, default=0.2, help="with --queries: share held out for validation")
    t.add_argument("--epochs", type=int, default=8)
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--labelled-repeat", type=int, default=2, help="with --data: times each expert question is seen per epoch")
    t.add_argument("--synthetic-per-domain", type=int, default=150, help="with --data: synthetic queries per domain (-1: all)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", help="continue from a checkpoint folder (printed on Ctrl-C)")
    t.add_argument("--no-activate", action="store_true", help="save the version without activating it")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_train_router)

    t = tsub.add_parser("abstention", help="fit the 'not covered' decision for the active router (or index) version")
    t.add_argument("--queries", nargs="+", required=True, help="in-scope questions (the router's validation questions)")
    t.add_argument("--out-of-scope", required=True, help="questions the documentation does not answer (queries.jsonl format)")
    t.add_argument("--false-refusal", type=float, default=0.03, help="share of in-scope fitting questions refused")
    t.add_argument("--folds", type=int, default=5, help="k-fold for the held-out figures")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--dry-run", action="store_true", help="report the held-out figures without storing the model")
    t.set_defaults(func=cmd_train_abstention)

    t = tsub.add_parser("retriever", help="fine-tune the bi-encoder (symmetric InfoNCE) on a training set")
    t.add_argument("--data", required=True, help="training set from 'fedqa data build'")
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--lr", type=float, default=3e-5)
    t.add_argument("--temperature", type=float, default=0.05)
    t.add_argument("--max-seq-length", type=int, default=128, help="tokens per text in training; saved with the model, so also for index build")
    t.add_argument("--negatives", type=int, default=1, help="hard negatives per query in a batch")
    t.add_argument("--max-examples", type=int, default=800, help="every labelled/cross example, then synthetic ones up to this many (0: all)")
    t.add_argument("--labelled-repeat", type=int, default=2)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    t.add_argument("--base-model", help="sentence-transformers folder to start from (default: the configured or shipped MiniLM)")
    t.add_argument("--no-base-eval", action="store_true", help="skip evaluating the base model")
    t.add_argument("--resume", help="continue from a checkpoint folder (printed on Ctrl-C)")
    t.add_argument("--no-activate", action="store_true")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_train_retriever)

    s = sub.add_parser("data", help="training data")
    dsub = s.add_subparsers(dest="what", required=True)
    t = dsub.add_parser("build", help="router and retriever training sets from a corpus and labelled queries")
    t.add_argument("--corpus", nargs="+", help="docs.jsonl or folders of pages (default: the active index's passages)")
    t.add_argument("--domain", help="domain of the pages (when a corpus path is one domain's folder)")
    t.add_argument("--queries", nargs="*", default=[], help="labelled queries (queries.jsonl format), e.g. queries_dev.jsonl cross_dev.jsonl")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--val-fraction", type=float, default=0.3, help="share of labelled queries held out (per domain, by qid)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--generator", choices=["heuristic", "llm", "both"], default="heuristic", help="synthetic query generator(s)")
    t.add_argument("--synthetic-per-domain", type=int, default=300, help="passages per domain given synthetic queries")
    t.add_argument("--llm-per-domain", type=int, default=50, help="of those, how many per domain the LLM writes for")
    t.add_argument("--negatives", type=int, default=3, help="hard negatives per query")
    t.add_argument("--cross", type=int, default=100, help="cross-domain questions joined from labelled ones")
    t.add_argument("--pool-random", type=int, default=2000, help="random passages in the validation candidate pool")
    t.add_argument("--label-relevance", action="store_true", help="LLM relevance labels (paper's annotation prompt)")
    t.add_argument("--label-limit", type=int, default=500, help="most query-passage pairs to label")
    t.add_argument("--force", action="store_true", help="replace --out if it exists")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_data_build)

    s = sub.add_parser("index", help="index versions")
    isub = s.add_subparsers(dest="what", required=True)
    t = isub.add_parser("build", help="re-embed the active index's passages with a retriever into a new index version")
    t.add_argument("--retriever", help="retriever version or 'base' (default: the active retriever)")
    t.add_argument("--no-activate", action="store_true")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=cmd_index_build)

    s = sub.add_parser("models", help="list, activate and roll back versions")
    msub = s.add_subparsers(dest="what", required=True)
    t = msub.add_parser("list", help="versions of every kind, with their metrics")
    t.add_argument("--kind", choices=["index", "router", "retriever"])
    t.set_defaults(func=cmd_models_list)
    t = msub.add_parser("activate", help="make a version active (kind from its name); the service picks it up on reload")
    t.add_argument("version")
    t.set_defaults(func=cmd_models_activate)
    t = msub.add_parser("rollback", help="re-activate the previously active version of a kind")
    t.add_argument("kind", choices=["index", "router", "retriever"])
    t.set_defaults(func=cmd_models_rollback)
    t = msub.add_parser("evaluate", help="retrieval Acc@1/Recall@5,10/MRR of an index version over its whole corpus")
    t.add_argument("--queries", nargs="+", required=True)
    t.add_argument("--index", help="index version (default: the active one)")
    t.set_defaults(func=cmd_models_evaluate)

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
    s.add_argument("--metrics", default="retrieval", help="comma-separated: retrieval,answers,answer,wixqa,rageval,ragxplain")
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
    if args.command in ("train", "data", "index", "models"):
        _quiet_threads()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; the active versions are unchanged", file=sys.stderr)
        return 130
    except TrainingInterrupted as exc:
        print(f"fedqa: {exc}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as exc:
        print(f"fedqa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
