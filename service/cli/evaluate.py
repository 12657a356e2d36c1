"""``fedqa evaluate``: run (or resume, or dry-run) an evaluation job in-process and write its outputs.

The job runs through :func:`service.evaluation.runner.run_job`, as the ``/evaluate`` worker's do.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from service.cli.common import print_json, settings, split_list
from service.config import Settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers
    from service.evaluation.jobs import JobStore
    from service.schemas import EvalQuery, EvalSpec


def register(sub: Subparsers) -> None:
    """Add ``evaluate`` to the parser."""
    s = sub.add_parser("evaluate", help="evaluate strategies on labelled questions (summary.json, results.jsonl, report.html)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--queries", nargs="+", metavar="FILE", help="queries.jsonl files (qid, query, domains, gold_doc_ids, answer), e.g. a uni and a cross set"
    )
    src.add_argument("--dataset", help="a dataset name: demo, or NAME in $FEDQA_HOME/eval/datasets/NAME.jsonl")
    src.add_argument("--resume", metavar="JOB", help="finish an interrupted job of this home")
    s.add_argument("--strategies", default="fused,mkpqa,uis,rfs", help="comma-separated: fused,mkpqa,uis,rfs,lfs")
    s.add_argument("--domains", help="product filter: comma-separated domains every question searches (routing given)")
    s.add_argument("--metrics", default="retrieval", help="comma-separated: retrieval,answers,answer,wixqa,rageval,ragxplain")
    s.add_argument("--top-k", type=int, default=5, help="ranking depth scored")
    s.add_argument(
        "--gate", choices=["deterministic", "stochastic"], default="deterministic", help="the gate's mode (stochastic: sampled, with --seed)"
    )
    s.add_argument("--seed", type=int, help="stochastic gate: question i uses seed + i")
    s.add_argument("--limit", type=int, help="only the first N questions")
    s.add_argument("--out", help="folder for summary.json, results.jsonl and report.html")
    s.add_argument("--dry-run", action="store_true", help="only count the LLM calls the job would make")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument(
        "--restart",
        action="store_true",
        help="with --resume: when the serving versions changed since the job started, start it again "
        "(default: refuse, so one result never mixes two systems)",
    )
    s.set_defaults(func=cmd_evaluate)


@dataclass
class NewJob:
    """A job the options describe, before it is stored."""

    spec: EvalSpec
    queries: list[EvalQuery]
    dataset: str


def new_job(args: argparse.Namespace, s: Settings) -> NewJob:
    """The spec and questions of ``--queries FILE...`` or ``--dataset NAME`` (first ``--limit`` questions)."""
    from service.evaluation.runner import load_dataset, query_record
    from service.queries import load_files
    from service.schemas import EvalSpec

    spec = EvalSpec.model_validate(
        {
            "strategies": split_list(args.strategies),
            "metrics": split_list(args.metrics),
            "top_k": args.top_k,
            "gate": args.gate,
            "seed": args.seed,
            "domains": split_list(args.domains) if args.domains else None,
        }
    )
    if args.queries:
        files = [args.queries] if isinstance(args.queries, str) else list(args.queries)
        queries = [query_record(q) for q in load_files(files, require_domains=True)]
        dataset = "+".join(Path(f).name for f in files)
    else:
        queries, dataset = load_dataset(args.dataset, s.home_dir), args.dataset
    if args.limit:
        queries = queries[: args.limit]
    return NewJob(spec, queries, dataset)


def check_args(args: argparse.Namespace) -> None:
    """What the options get wrong, refused before a model loads (an evaluation's outputs are written at its end)."""
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be 1 or more (given {args.limit})")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file: give a folder for summary.json, results.jsonl and report.html")


def print_plan(job: NewJob, s: Settings) -> None:
    """``--dry-run``: how many LLM calls the job would make."""
    from service.artifacts import Registry
    from service.evaluation.runner import plan

    domains = (Registry(s.home_dir).active_manifest("index") or {}).get("domains", {})
    plan_ = plan(job.spec, len(job.queries), len(domains), s.judge_retries)
    print_json({"dry_run": True, "dataset": job.dataset, "spec": job.spec.model_dump(), "plan": plan_})


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Run the job, write ``--out``, print a short table to stderr and the summary to stdout."""
    from service.evaluation.jobs import JobStore
    from service.evaluation.runner import EvaluationError, write_outputs

    check_args(args)
    s = settings()
    store = JobStore.for_settings(s)
    job: NewJob | None = None
    spec: EvalSpec
    if args.resume:
        stored = store.spec(args.resume)
        if stored is None:
            raise EvaluationError(f"no evaluation job {args.resume} in {s.home_dir}")
        if (store.get(args.resume) or {}).get("status") == "cancelled":
            raise EvaluationError(f"evaluation job {args.resume} was cancelled and its questions dropped: submit it again")
        job_id: str | None = args.resume
        spec, n = stored, len(store.queries(args.resume))
    else:
        job = new_job(args, s)
        if args.dry_run:
            print_plan(job, s)
            return 0
        job_id, spec, n = None, job.spec, len(job.queries)
    summary, job_id = run_in_process(s, store, spec, job_id, job, n, quiet=args.quiet, restart=args.restart)
    if summary is None:
        return 1
    if args.out:
        paths = write_outputs(args.out, summary, store.results(job_id))
        print(f"wrote {paths['summary']}, {paths['results']}, {paths['report']}", file=sys.stderr)
    print_table(summary, sys.stderr)
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return 0


def run_in_process(
    s: Settings,
    store: JobStore,
    spec: EvalSpec,
    job_id: str | None,
    job: NewJob | None,
    n: int,
    *,
    quiet: bool,
    restart: bool = False,
) -> tuple[dict[str, Any] | None, str]:
    """Open the pipeline (and judge), store the job when new, claim it and run it; (summary or None, job id)."""
    from service.evaluation.jobs import owner_id
    from service.evaluation.judges import open_judge
    from service.evaluation.runner import EvaluationError, create_job, needs_judge, needs_llm, pinned_versions, run_job
    from service.evaluation.worker import Heartbeat
    from service.loading import load_pipeline

    pipeline = load_pipeline(s, with_llm=needs_llm(spec))
    try:
        judge = None
        if needs_judge(spec):
            judge = open_judge(s, pipeline.llm)
            if judge is None:
                raise EvaluationError("judge metrics need a judge: set FEDQA_JUDGE_BASE_URL or an LLM backend")
        if job_id is None:
            assert job is not None  # a new job when there is no id to resume
            job_id = create_job(store, spec, job.queries, job.dataset, pinned_versions(pipeline, judge, spec))
        owner = owner_id("cli")
        if not store.claim(job_id, owner):
            raise EvaluationError(f"job {job_id} is being run by another process")
        print(
            f"evaluation job {job_id}: {n} questions x {len(spec.strategies)} strategies "
            f"(gate {spec.gate}); resume with: fedqa evaluate --resume {job_id}",
            file=sys.stderr,
        )
        bar = None
        if not quiet:
            from tqdm import tqdm

            bar = tqdm(total=n * len(spec.strategies), unit="q", desc="evaluate", file=sys.stderr)

        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar.n = done
                bar.refresh()

        try:
            with Heartbeat(store, job_id, owner):
                return run_job(pipeline, judge, store, job_id, progress=progress, restart=restart), job_id
        finally:
            if bar is not None:
                bar.close()
            store.release(job_id, owner)
    finally:
        pipeline.close()


def print_table(summary: dict[str, Any], out: IO[str]) -> None:
    """A short human table of the headline metrics."""
    metrics = [
        m
        for m in (
            "acc_at_top1",
            f"recall_at_{summary['spec']['top_k']}",
            "mrr",
            "answer_f1",
            "answer_rouge_l",
            "false_refusal",
            "abstained",
            "relevancy",
            "faithfulness",
        )
        if m in summary["metrics"]
    ]
    groups = [g for g in ("all", "uni", "cross", "oos") if g in summary["n_by_group"]]
    print(f"{'strategy':<9}{'group':<7}{'n':>5}" + "".join(f"{m:>14}" for m in metrics), file=out)
    for s, per in summary["results"].items():
        for g in groups:
            if g in per:
                vals = "".join(f"{'-' if per[g][m] is None else format(per[g][m], '.3f'):>14}" for m in metrics)
                print(f"{s:<9}{g:<7}{summary['n_by_group'][g]:>5}{vals}", file=out)
