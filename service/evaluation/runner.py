"""One evaluation: every question through every strategy and its metrics; the summary is :mod:`.summary`'s.

The CLI (:mod:`service.cli.evaluate`) and the ``/evaluate`` worker both call :func:`run_job` on a job stored in the
:class:`~service.evaluation.jobs.JobStore`, so they give the same numbers; one question with one strategy is
:func:`~service.evaluation.question.evaluate_question`. Evaluation uses the
deterministic gate unless the spec asks for the stochastic one (then question i uses seed + i).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.evaluation import rageval
from service.evaluation.groups import GROUPS, metric_groups, needs_answers, needs_judge
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge, Outcome
from service.evaluation.question import EvaluationError, evaluate_question
from service.evaluation.quota import JobQuota
from service.evaluation.record import QuestionRecord
from service.evaluation.spec import JobQuestion, JobSpec
from service.evaluation.summary import strategy_insights, summarize
from service.queries import LabelledQuery
from service.schemas import EvalQuery, EvalSpec, MetricGroup

if TYPE_CHECKING:
    from service.pipeline import Pipeline, Prepared

log = logging.getLogger("fedqa.evaluation")

BATCH = 32  # questions per router/encoder batch


def needs_llm(spec: EvalSpec) -> bool:
    """Answers (through the configured answering path, LLM included) or the lfs selector need the LLM."""
    return needs_answers(spec) or "lfs" in spec.strategies


def query_record(q: LabelledQuery) -> EvalQuery:
    """A labelled question of a queries.jsonl file as a question to evaluate."""
    return EvalQuery(
        qid=q.qid, query=q.query, domains=q.domains, gold_doc_ids=q.gold_doc_ids, answer=q.answer, kind=q.kind, grading_note=q.grading_note
    )


def dedupe_qids(queries: Sequence[EvalQuery]) -> list[JobQuestion]:
    """The job's questions: every question with a unique qid (q<n> when missing, suffixes for repeats)."""
    seen: Counter[str] = Counter()
    out = []
    for i, q in enumerate(queries, 1):
        qid = str(q.qid or f"q{i:04d}")
        seen[qid] += 1
        if seen[qid] > 1:
            qid = f"{qid}#{seen[qid]}"
        out.append(JobQuestion(**{**q.model_dump(), "qid": qid}))
    return out


# --------------------------------------------------------------------------- dry run
def plan(spec: EvalSpec, n_questions: int, n_domains: int, retries: int) -> dict[str, Any]:
    """How many LLM calls a job makes: exact counts without retries, and the bound with every retry used. With an LLM
    answering and a fitted split rule, a question with several plausible products asks up to one ``generation`` more
    per product (as ``/ask`` does), which no count made before retrieval can know."""
    groups = [GROUPS[g] for g in metric_groups(spec)]
    n_strat = len(spec.strategies)
    per_q_strategy: dict[str, int] = {"generation": 1} if needs_judge(spec) else {}
    for g in groups:
        per_q_strategy.update(g.answer_calls)
    calls = {k: v * n_questions * n_strat for k, v in per_q_strategy.items()}
    if "lfs" in spec.strategies:
        calls["lfs_selection"] = n_domains * n_questions
    for g in groups:
        calls.update({k: v * n_questions for k, v in g.question_calls.items()})
    for g in groups:
        calls.update({k: v * n_strat for k, v in g.strategy_calls.items()})
    judge_calls = sum(v for k, v in calls.items() if k not in ("generation", "lfs_selection"))
    other = calls.get("generation", 0) + calls.get("lfs_selection", 0)
    return {
        "questions": n_questions,
        "strategies": n_strat,
        "llm_calls": calls,
        "total_llm_calls": judge_calls + other,
        "judge_calls": judge_calls,
        "max_llm_calls_with_retries": other + judge_calls * (retries + 1),
    }


# --------------------------------------------------------------------------- a job
def _key_points(store: JobStore, job_id: str, judge: Judge | None, q: JobQuestion) -> Callable[[], Outcome]:
    """RAGEval's key points of a question's reference answer: extracted once per job (cached), on first use."""

    def get() -> Outcome:
        if judge is None:
            return Outcome.skipped("no judge")
        cached = store.cache_get(job_id, f"keypoints:{q.qid}")
        if cached is not None:
            return Outcome(cached["value"], error=cached["error"], kind=cached["kind"], detail=cached.get("detail") or {})
        out = rageval.extract_keypoints(judge, q.query, q.answer)
        store.cache_set(job_id, f"keypoints:{q.qid}", out.as_dict())
        return out

    return get


def _insights(store: JobStore, job_id: str, judge: Judge | None, strategies: Sequence[str], records: Sequence[QuestionRecord]) -> dict[str, Any]:
    """RAGXplain's insights per strategy, cached in the job so a resumed job does not ask again."""
    insights = {}
    for s in strategies:
        cached = store.cache_get(job_id, f"insights:{s}")
        if cached is None:
            cached = strategy_insights(judge, s, [r for r in records if r.strategy == s])
            store.cache_set(job_id, f"insights:{s}", cached)
        insights[s] = cached
    return insights


def _in_windows(
    pipeline: Pipeline,
    queries: list[JobQuestion],
    is_done: Callable[[JobQuestion], bool],
    one: Callable[[int, JobQuestion, Prepared], None],
    should_stop: Callable[[], bool],
    workers: int,
) -> None:
    """Call ``one(position, question, prepared)`` for every unfinished question, ``workers`` at a time.

    Router and encoder run once per fixed window of questions (a batch), so a resumed job embeds
    exactly the batches an uninterrupted one would and its numbers are identical.
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fedqa-eval-q") if workers > 1 else None
    try:
        for start in range(0, len(queries), BATCH):
            window = list(enumerate(queries))[start : start + BATCH]
            if should_stop():
                break
            if all(is_done(q) for _, q in window):
                continue
            prepared = pipeline.prepare_many([q.query for _, q in window])
            if pool is None:
                for (i, q), prep in zip(window, prepared, strict=True):
                    one(i, q, prep)
            else:
                for f in [pool.submit(one, i, q, prep) for (i, q), prep in zip(window, prepared, strict=True)]:
                    f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def pinned_versions(pipeline: Pipeline, judge: Judge | None, spec: EvalSpec) -> dict[str, Any]:
    """The versions that decide a job's numbers: index, router, retriever, and the LLM and judge when used."""
    v = pipeline.versions
    out: dict[str, Any] = {k: v.get(k) for k in ("index", "router", "retriever")}
    if needs_llm(spec):
        out["llm"] = v.get("llm")
    if needs_judge(spec):
        out["judge"] = judge.name if judge is not None else None
    return out


def check_versions(pipeline: Pipeline, judge: Judge | None, store: JobStore, job_id: str, spec: EvalSpec, *, restart: bool = False) -> None:
    """Make sure a job's results all come from one set of versions.

    A job not started yet is (re)pinned to ``pipeline``'s versions. A job with finished questions
    whose pinned versions differ from ``pipeline``'s is refused (marked failed, EvaluationError), or
    with ``restart`` its finished questions and judge cache are dropped and it starts again pinned anew."""
    current = pinned_versions(pipeline, judge, spec)
    pinned = store.versions(job_id)
    if pinned == current:
        return
    if pinned is None or not store.done_keys(job_id) or restart:
        if restart:
            store.clear_results(job_id)
        store.pin(job_id, current)
        return
    changed = {k: [pinned.get(k), current.get(k)] for k in sorted(set(pinned) | set(current)) if pinned.get(k) != current.get(k)}
    message = (
        f"job {job_id} was started with other versions than the ones serving now {changed} (was, now); "
        "resuming would mix two systems in one result: submit it again, or restart it "
        f"(fedqa evaluate --resume {job_id} --restart)"
    )
    store.set_status(job_id, "failed", error=message)
    raise EvaluationError(message)


def _runnable_job(pipeline: Pipeline, judge: Judge | None, store: JobStore, job_id: str, restart: bool) -> JobSpec:
    """The stored job's spec, once it is known to be runnable here (it exists, has the judge it needs, same versions)."""
    spec = store.spec(job_id)
    if spec is None:
        raise EvaluationError(f"no evaluation job {job_id}")
    if needs_judge(spec) and judge is None:
        store.set_status(job_id, "failed", error="judge metrics need a judge: set FEDQA_JUDGE_BASE_URL or an LLM")
        raise EvaluationError("judge metrics need a judge: set FEDQA_JUDGE_BASE_URL (or FEDQA_LLM_*), or use --metrics retrieval")
    check_versions(pipeline, judge, store, job_id, spec, restart=restart)
    return spec


def run_job(
    pipeline: Pipeline,
    judge: Judge | None,
    store: JobStore,
    job_id: str,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
    restart: bool = False,
) -> dict[str, Any] | None:
    """Evaluate a stored job, skipping the questions already finished; returns the summary, or None
    when stopped (or cancelled) before the end. Each finished question is committed at once.

    A resume with other versions than the job was pinned to is refused (see :func:`check_versions`;
    ``restart``: start it again instead)."""
    spec = _runnable_job(pipeline, judge, store, job_id, restart)
    queries = store.queries(job_id)
    strategies, groups = spec.strategies, metric_groups(spec)
    done = store.done_keys(job_id)
    total = len(queries) * len(strategies)
    counter = {"done": len(done)}
    counter_lock = threading.Lock()
    if progress:
        progress(counter["done"], total)

    def one(position: int, q: JobQuestion, prepared: Prepared) -> None:
        for strategy in [s for s in strategies if (s, q.qid) not in done]:
            if should_stop():
                return
            record = evaluate_question(
                pipeline,
                judge,
                spec,
                q,
                position,
                strategy,
                prepared,
                _key_points(store, job_id, judge, q) if MetricGroup.RAGEVAL in groups else None,
            )
            if judge is not None:
                record.judge = judge.name
            store.save_result(job_id, record)
            with counter_lock:
                counter["done"] += 1
                if progress:
                    progress(counter["done"], total)

    workers = judge.concurrency if (judge is not None and needs_judge(spec)) else 1
    _in_windows(pipeline, queries, lambda q: all((s, q.qid) in done for s in strategies), one, should_stop, workers)
    if should_stop():
        return None
    records = store.results(job_id)
    insights = _insights(store, job_id, judge, strategies, records) if MetricGroup.RAGXPLAIN in groups else None
    summary = summarize(spec, queries, records, dataset=spec.dataset, job_id=job_id, versions=pipeline.versions, insights=insights)
    store.finish(job_id, summary)
    return summary


# --------------------------------------------------------------------------- datasets and outputs
def load_dataset(name: str, home: str | Path) -> list[EvalQuery]:
    """Questions of a named dataset: ``demo`` (shipped), or ``$FEDQA_HOME/eval/datasets/NAME.jsonl``; a
    :class:`~service.queries.LabelError` lists the questions without ``domains`` (what they would be scored as is
    not known)."""
    from dataclasses import replace

    from service.queries import LabelError, load_queries

    if name == "demo":
        from service.demo import QUERIES

        path = QUERIES
    else:
        path = Path(home).expanduser() / "eval" / "datasets" / f"{name}.jsonl"
        if not path.is_file():
            where = f"$FEDQA_HOME/eval/datasets/{name}.jsonl"  # as the client named it: the server's path is not theirs to know
            raise EvaluationError(f"no dataset {name!r}: put its queries.jsonl at {where}, or send the questions inline")
    try:
        return [query_record(q) for q in load_queries(path, require_domains=True)]
    except LabelError as exc:  # named by line of NAME.jsonl, as the client knows it
        rename = f"{name}.jsonl"
        problems = [replace(p, where=p.where.replace(str(path), rename)) for p in exc.problems]
        raise LabelError(exc.summary.replace(str(path), rename), problems) from None
    except (OSError, ValueError) as exc:  # bad JSON, bad UTF-8 or a line without "query", named by line (not by the server's path)
        raise EvaluationError(str(exc).replace(str(path), f"{name}.jsonl")) from None


def create_job(
    store: JobStore,
    spec: EvalSpec,
    queries: Sequence[EvalQuery],
    dataset: str,
    versions: dict[str, Any] | None = None,
    *,
    client: str | None = None,
    quota: JobQuota | None = None,
) -> str:
    """Store a new job (questions de-duplicated by qid; ``spec`` a :class:`JobSpec` when the job has a ``scope``),
    pinned to ``versions`` (:func:`pinned_versions` of the pipeline that will run it; None: pinned when it starts);
    returns its id. ``client`` and ``quota``: see :meth:`JobStore.create` (TooManyJobs, TooMuchStored)."""
    if not queries:
        raise EvaluationError("no questions to evaluate")
    job_spec = JobSpec.model_validate({**spec.model_dump(), "dataset": dataset})
    return store.create(job_spec, dedupe_qids(queries), versions, client=client, quota=quota)


def write_outputs(out: str | Path, summary: dict[str, Any], records: Sequence[QuestionRecord]) -> dict[str, str]:
    """summary.json, results.jsonl (one record per strategy and question) and report.html in ``out``."""
    from service.evaluation.report import render

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    with (path / "results.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.stored(), ensure_ascii=False) + "\n")
    (path / "report.html").write_text(render(summary, records), encoding="utf-8")
    return {k: str(path / f) for k, f in (("summary", "summary.json"), ("results", "results.jsonl"), ("report", "report.html"))}
