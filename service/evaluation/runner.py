"""One evaluation: every question through every strategy, its metrics, and the summary.

The CLI (:mod:`service.cli.evaluate`) and the ``/evaluate`` worker both call :func:`run_job` on a job stored in the
:class:`~service.evaluation.jobs.JobStore`, so they give the same numbers. Evaluation uses the
deterministic gate unless the spec asks for the stochastic one (then question i uses seed + i).

Groups of the summary: ``all``; ``uni`` or ``cross`` (a question with more than one domain is cross);
``domain:<name>`` for each domain a question belongs to (a cross question counts in each of its domains).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.evaluation import rageval, ragxplain
from service.evaluation.groups import GROUPS, Scoring, metric_groups
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge, Outcome
from service.evaluation.stats import mean_ci
from service.queries import LabelledQuery
from service.schemas import MetricGroup, Strategy

if TYPE_CHECKING:
    from service.pipeline import Pipeline, Prepared, Retrieval

log = logging.getLogger("fedqa.evaluation")

BATCH = 32  # questions per router/encoder batch


class EvaluationError(ValueError):
    """A job that cannot run as asked (e.g. judge metrics without a judge)."""


def metric_names(spec: dict[str, Any]) -> list[str]:
    """The metrics a spec produces, in report order."""
    return [name for g in metric_groups(spec) for name in GROUPS[g].metrics(spec["top_k"])]


def judged_metric_names(spec: dict[str, Any]) -> list[str]:
    """The metrics whose numbers come from the judge."""
    return [name for g in metric_groups(spec) for name in GROUPS[g].judged]


def needs_judge(spec: dict[str, Any]) -> bool:
    """Some metric group scores generated answers with the judge."""
    return any(GROUPS[g].needs_judge for g in metric_groups(spec))


def needs_llm(spec: dict[str, Any]) -> bool:
    """Generation (answers) or the lfs selector need an LLM."""
    return needs_judge(spec) or "lfs" in spec["strategies"]


def query_record(q: LabelledQuery) -> dict[str, Any]:
    return {"qid": q.qid, "query": q.query, "domains": q.domains, "gold_doc_ids": q.gold_doc_ids,
            "answer": q.answer, "kind": q.kind, "grading_note": q.grading_note}


def dedupe_qids(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every question a unique qid (q<n> when missing, suffixes for repeats)."""
    seen: Counter[str] = Counter()
    out = []
    for i, q in enumerate(queries, 1):
        qid = str(q.get("qid") or f"q{i:04d}")
        seen[qid] += 1
        if seen[qid] > 1:
            qid = f"{qid}#{seen[qid]}"
        out.append({**q, "qid": qid})
    return out


# --------------------------------------------------------------------------- dry run
def plan(spec: dict[str, Any], n_questions: int, n_domains: int, retries: int) -> dict[str, Any]:
    """How many LLM calls a job makes: exact counts without retries, and the bound with every retry used."""
    groups = [GROUPS[g] for g in metric_groups(spec)]
    n_strat = len(spec["strategies"])
    per_q_strategy: dict[str, int] = {"generation": 1} if needs_judge(spec) else {}
    for g in groups:
        per_q_strategy.update(g.answer_calls)
    calls = {k: v * n_questions * n_strat for k, v in per_q_strategy.items()}
    if "lfs" in spec["strategies"]:
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


# --------------------------------------------------------------------------- one question
def _record(q: dict[str, Any], position: int, strategy: Strategy, ret: Retrieval) -> dict[str, Any]:
    """A question's record before scoring: the question, the ranking and the routing."""
    domains = q.get("domains") or []
    record: dict[str, Any] = {
        "qid": q["qid"], "query": q["query"], "domains": domains, "kind": "cross" if len(domains) > 1 else "uni",
        "strategy": strategy, "position": position, "gold_doc_ids": q.get("gold_doc_ids") or [],
        "ranking": [{"doc_id": h.passage.doc_id, "domain": h.passage.domain, "title": h.passage.title,
                     "score": round(h.score, 6), "unified_score": round(h.unified_score, 6)} for h in ret.hits],
        "active_domains": ret.routing.active_domains, "fallback": ret.routing.fallback,
        "probabilities": ret.routing.probabilities,
        "metrics": {}, "outcomes": {},
    }
    if ret.routing.selector:
        record["selector"] = {k: v for k, v in ret.routing.selector.items() if k != "errors"}
        record["selector"]["errors"] = list(ret.routing.selector.get("errors", {}).values())[:3]
    return record


def evaluate_question(
    pipeline: Pipeline, judge: Judge | None, spec: dict[str, Any], q: dict[str, Any], position: int, strategy: Strategy,
    prepared: Prepared | None, key_points: Callable[[], Outcome] | None = None,
) -> dict[str, Any]:
    """Retrieve (and answer, and judge) one question with one strategy; returns its record."""
    top_k = spec["top_k"]
    seed = (spec["seed"] + position) if spec.get("seed") is not None else None
    t0 = time.perf_counter()
    ret = pipeline.retrieve(q["query"], top_k=top_k, seed=seed, gate_mode=spec["gate"], strategy=strategy, prepared=prepared)
    record = _record(q, position, strategy, ret)
    scoring = Scoring(record, q, ret.hits, ret.routing.active_domains, top_k, judge=judge, key_points=key_points)
    groups = [GROUPS[g] for g in metric_groups(spec)]
    for g in groups:
        if g.score_ranking is not None:
            g.score_ranking(scoring)
    if needs_judge(spec):
        t_gen = time.perf_counter()
        answer, mode, error = pipeline.generate(ret, context_passages=top_k)
        record.update(answer=answer, answer_mode=mode, answer_error=error,
                      generate_ms=round((time.perf_counter() - t_gen) * 1000, 1))
        if judge is None:
            raise EvaluationError("judge metrics need a judge")
        scoring.answer = answer
        for g in groups:
            if g.score_answer is not None:
                g.score_answer(scoring)
    record["ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return record


# --------------------------------------------------------------------------- a job
def run_job(
    pipeline: Pipeline, judge: Judge | None, store: JobStore, job_id: str, *,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | None:
    """Evaluate a stored job, skipping the questions already finished; returns the summary, or None
    when stopped (or cancelled) before the end. Each finished question is committed at once."""
    job = store.get(job_id)
    if job is None:
        raise EvaluationError(f"no evaluation job {job_id}")
    spec = job["spec"]
    if needs_judge(spec) and judge is None:
        store.set_status(job_id, "failed", error="judge metrics need a judge: set FEDQA_JUDGE_BASE_URL or an LLM")
        raise EvaluationError("judge metrics need a judge: set FEDQA_JUDGE_BASE_URL (or FEDQA_LLM_*), or use --metrics retrieval")
    queries = store.queries(job_id)
    strategies = spec["strategies"]
    done = store.done_keys(job_id)
    total = len(queries) * len(strategies)
    counter = {"done": len(done)}
    counter_lock = threading.Lock()
    if progress:
        progress(counter["done"], total)

    def key_points_for(q: dict[str, Any]) -> Callable[[], Outcome]:
        def get() -> Outcome:
            if judge is None:
                return Outcome.skipped("no judge")
            cached = store.cache_get(job_id, f"keypoints:{q['qid']}")
            if cached is not None:
                return Outcome(cached["value"], error=cached["error"], kind=cached["kind"], detail=cached.get("detail") or {})
            out = rageval.extract_keypoints(judge, q["query"], q.get("answer"))
            store.cache_set(job_id, f"keypoints:{q['qid']}", out.as_dict())
            return out
        return get

    def one(position: int, q: dict[str, Any], prepared: Prepared) -> None:
        for strategy in [s for s in strategies if (s, q["qid"]) not in done]:
            if should_stop():
                return
            record = evaluate_question(pipeline, judge, spec, q, position, strategy, prepared,
                                       key_points_for(q) if MetricGroup.RAGEVAL in metric_groups(spec) else None)
            if judge is not None:
                record["judge"] = judge.name
            store.save_result(job_id, strategy, q["qid"], position, record)
            with counter_lock:
                counter["done"] += 1
                if progress:
                    progress(counter["done"], total)

    # Router and encoder run once per fixed window of questions (a batch), so a resumed job embeds
    # exactly the batches an uninterrupted one would and its numbers are identical.
    workers = judge.concurrency if (judge is not None and needs_judge(spec)) else 1
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fedqa-eval-q") if workers > 1 else None
    try:
        for start in range(0, len(queries), BATCH):
            window = list(enumerate(queries))[start : start + BATCH]
            if should_stop():
                break
            if all((s, q["qid"]) in done for _, q in window for s in strategies):
                continue
            prepared = pipeline.prepare_many([q["query"] for _, q in window])
            if pool is None:
                for (i, q), prep in zip(window, prepared, strict=True):
                    one(i, q, prep)
            else:
                for f in [pool.submit(one, i, q, prep) for (i, q), prep in zip(window, prepared, strict=True)]:
                    f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    if should_stop():
        return None
    records = store.results(job_id)
    insights = None
    if MetricGroup.RAGXPLAIN in metric_groups(spec):
        insights = {}
        for s in strategies:
            cached = store.cache_get(job_id, f"insights:{s}")
            if cached is None:
                cached = strategy_insights(judge, s, [r for r in records if r["strategy"] == s])
                store.cache_set(job_id, f"insights:{s}", cached)
            insights[s] = cached
    summary = summarize(spec, queries, records, dataset=job["spec"].get("dataset", "inline"), job_id=job_id,
                        versions=pipeline.versions, insights=insights)
    store.finish(job_id, summary)
    return summary


def strategy_insights(judge: Judge | None, strategy: str, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """RAGXplain's dataset-level insights and action items for one strategy's records."""
    means = {m: mean_ci([r["metrics"].get(m) for r in records])["mean"] for m in ragxplain.METRICS}
    low: list[tuple[float, str]] = []
    for r in records:
        for m in ragxplain.METRICS:
            o = r.get("outcomes", {}).get(m) or {}
            if o.get("value") is not None and o.get("explanation"):
                low.append((o["value"], f"{m} = {o['value']:.1f} on '{r['query'][:80]}': {o['explanation'][:200]}"))
    low.sort(key=lambda t: t[0])
    return ragxplain.insights(judge, strategy, means, len(records), [e for _, e in low[:8]])


# --------------------------------------------------------------------------- summary
def groups_of(record: dict[str, Any]) -> list[str]:
    return ["all", record["kind"]] + [f"domain:{d}" for d in record.get("domains", [])]


def _group_order(names: Iterable[str]) -> list[str]:
    head = [g for g in ("all", "uni", "cross") if g in names]
    return head + sorted(g for g in names if g.startswith("domain:"))


def summarize(
    spec: dict[str, Any], queries: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]], *,
    dataset: str, job_id: str | None = None, versions: dict[str, Any] | None = None,
    insights: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The job's summary: means per strategy and group, 95% intervals, counts and failures."""
    names = metric_names(spec)
    judged = set(judged_metric_names(spec))
    by: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for g in groups_of(r):
            by[r["strategy"]][g].append(r)
    results: dict[str, Any] = {}
    ci95: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    failures: dict[str, Any] = {}
    for s in spec["strategies"]:
        results[s], ci95[s], counts[s] = {}, {}, {}
        for g in _group_order(by[s]):
            rs = by[s][g]
            results[s][g], ci95[s][g] = {}, {}
            counts[s][g] = {"questions": len(rs)}
            for m in names:
                agg = mean_ci([r["metrics"].get(m) for r in rs])
                results[s][g][m] = None if agg["mean"] is None else round(agg["mean"], 6)
                ci95[s][g][m] = [None if v is None else round(v, 6) for v in agg["ci95"]]
                counts[s][g][m] = agg["n"]
        fails: dict[str, dict[str, int]] = {}
        for r in by[s]["all"]:
            for m, o in r.get("outcomes", {}).items():
                if o.get("kind"):
                    fails.setdefault(m, Counter())[o["kind"]] += 1
            sel = r.get("selector")
            if sel and sel.get("failures"):
                fails.setdefault("lfs_selection", Counter())["call_or_parse"] += sel["failures"]
        failures[s] = {m: dict(c) for m, c in fails.items()}
    n_by_group = Counter(g for q in queries for g in groups_of({**q, "kind": "cross" if len(q.get("domains") or []) > 1 else "uni"}))
    judge_names = sorted({r["judge"] for r in records if r.get("judge")})
    judge_calls = sum(o.get("calls", 0) for r in records for o in r.get("outcomes", {}).values())
    summary: dict[str, Any] = {
        "dataset": dataset,
        "n": len(queries),
        "results": results,
        "ci95": ci95,
        "counts": counts,
        "n_by_group": {g: n_by_group[g] for g in _group_order(n_by_group)},
        "failures": failures,
        "metrics": names,
        "spec": {k: spec[k] for k in ("strategies", "metrics", "top_k", "gate", "seed")},
        "notes": [
            f"gate: {spec['gate']}" + (f" (seed {spec['seed']} + question index)" if spec.get("seed") is not None else ""),
            "a question with more than one domain counts as cross, and in each of its domains",
            "failed judge calls are counted in 'failures' and left out of the means, never scored 0",
        ],
        "judge": {"model": ", ".join(judge_names) or None, "metrics": sorted(judged), "llm_calls": judge_calls} if judged else None,
        "versions": versions or {},
        "job": job_id,
    }
    if judged:
        modes: dict[str, dict[str, int]] = {}
        for r in records:
            modes.setdefault(r["strategy"], Counter())[r.get("answer_mode") or "none"] += 1
        summary["answer_modes"] = {s: dict(c) for s, c in modes.items()}
    if "lfs" in spec["strategies"]:
        lfs = [r for r in records if r["strategy"] == "lfs"]
        summary["lfs"] = {
            "llm": (versions or {}).get("llm"),
            "failed_votes": sum((r.get("selector") or {}).get("failures", 0) for r in lfs),
            "fallbacks": sum(1 for r in lfs if r.get("fallback")),
            "questions": len(lfs),
        }
    if insights is not None:
        summary["insights"] = insights
    return summary


# --------------------------------------------------------------------------- datasets and outputs
def load_dataset(name: str, home: str | Path) -> list[dict[str, Any]]:
    """Questions of a named dataset: ``demo`` (shipped), or ``$FEDQA_HOME/eval/datasets/NAME.jsonl``."""
    from service.queries import load_queries

    if name == "demo":
        from service.demo import QUERIES

        path = QUERIES
    else:
        path = Path(home).expanduser() / "eval" / "datasets" / f"{name}.jsonl"
        if not path.is_file():
            raise EvaluationError(f"no dataset {name!r}: put its queries.jsonl at {path}, or send the questions inline")
    return [query_record(q) for q in load_queries(path)]


def create_job(store: JobStore, spec: dict[str, Any], queries: list[dict[str, Any]], dataset: str) -> str:
    """Store a new job (questions de-duplicated by qid) and return its id."""
    if not queries:
        raise EvaluationError("no questions to evaluate")
    return store.create({**spec, "dataset": dataset}, dedupe_qids(queries))


def write_outputs(out: str | Path, summary: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """summary.json, results.jsonl (one record per strategy and question) and report.html in ``out``."""
    from service.evaluation.report import render

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    with (path / "results.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (path / "report.html").write_text(render(summary, records), encoding="utf-8")
    return {k: str(path / f) for k, f in (("summary", "summary.json"), ("results", "results.jsonl"), ("report", "report.html"))}
