"""One evaluation: every question through every strategy, its metrics, and the summary.

The CLI and the ``/evaluate`` worker both call :func:`run_job` on a job stored in the
:class:`~service.evaluation.jobs.JobStore`, so they give the same numbers. Evaluation uses the
deterministic gate unless the spec asks for the stochastic one (then question i uses seed + i).

Groups of the summary: ``all``; ``uni`` or ``cross`` (a question with more than one domain is cross);
``domain:<name>`` for each domain a question belongs to (a cross question counts in each of its domains).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from service.evaluation import answers, rageval, ragxplain, wixqa
from service.evaluation.jobs import JobStore
from service.evaluation.judges import Judge, Outcome, faithfulness, relevancy
from service.evaluation.retrieval_metrics import (
    acc_at_top1,
    effective_information_rate,
    mrr,
    recall_at_k,
    routing_accuracy,
    routing_exact,
)
from service.evaluation.stats import mean_ci
from service.queries import LabelledQuery

log = logging.getLogger("fedqa.evaluation")

JUDGED_GROUPS = ("answer", "wixqa", "rageval", "ragxplain")
ANSWER_METRICS = ("relevancy", "faithfulness")
WIXQA_LEXICAL = ("token_f1", "bleu", "rouge1", "rouge2")
WIXQA_JUDGED = ("context_recall", "factuality")
RAGEVAL_JUDGED = ("completeness", "hallucination", "irrelevance")
RAGEVAL_RETRIEVAL = ("retrieval_recall", "eir")


BATCH = 32  # questions per router/encoder batch


class EvaluationError(ValueError):
    """A job that cannot run as asked (e.g. judge metrics without a judge)."""


def retrieval_metric_names(top_k: int) -> list[str]:
    return ["acc_at_top1", f"recall_at_{top_k}", "mrr", "routing_accuracy", "routing_exact", "domains_searched"]


def metric_names(spec: dict[str, Any]) -> list[str]:
    """The metrics a spec produces, in report order."""
    groups = spec["metrics"]
    names: list[str] = []
    if "retrieval" in groups:
        names += retrieval_metric_names(spec["top_k"])
    if "answers" in groups:
        names += list(answers.METRICS)
    if "answer" in groups:
        names += ANSWER_METRICS
    if "wixqa" in groups:
        names += WIXQA_LEXICAL + WIXQA_JUDGED
    if "rageval" in groups:
        names += RAGEVAL_JUDGED + RAGEVAL_RETRIEVAL
    if "ragxplain" in groups:
        names += list(ragxplain.METRICS)
    return names


def judged_metric_names(spec: dict[str, Any]) -> list[str]:
    """The metrics whose numbers come from the judge."""
    groups = spec["metrics"]
    out: list[str] = []
    if "answer" in groups:
        out += ANSWER_METRICS
    if "wixqa" in groups:
        out += WIXQA_JUDGED
    if "rageval" in groups:
        out += RAGEVAL_JUDGED
    if "ragxplain" in groups:
        out += list(ragxplain.METRICS)
    return out


def needs_judge(spec: dict[str, Any]) -> bool:
    return any(g in spec["metrics"] for g in JUDGED_GROUPS)


def needs_answers(spec: dict[str, Any]) -> bool:
    """The metrics need the answering path's answers."""
    return needs_judge(spec) or "answers" in spec["metrics"]


def needs_llm(spec: dict[str, Any]) -> bool:
    """Answers (through the configured answering path, LLM included) or the lfs selector need the LLM."""
    return needs_answers(spec) or "lfs" in spec["strategies"]


# What a missing answer scores in each judged metric: a failure of the system, never of the judge.
NO_ANSWER_SCORES = {"relevancy": 0.0, "faithfulness": 0.0, "factuality": 0.0, "completeness": 0.0,
                    "hallucination": 0.0, "irrelevance": 1.0, **{m: 0.0 for m in ragxplain.METRICS}}


def _no_answer(record: dict[str, Any], names: Iterable[str], mode: str) -> None:
    """Score the judged metrics of a question the system did not answer (RAGEval: every key point missing)."""
    for n in names:
        record["metrics"][n] = NO_ANSWER_SCORES.get(n, 0.0)
        record["outcomes"][n] = {"value": record["metrics"][n], "explanation": f"no answer (answer_mode {mode}): "
                                 "scored as a failure of the system", "error": None, "kind": None, "calls": 0}


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
    per_q_strategy: dict[str, int] = {}
    groups = spec["metrics"]
    n_strat = len(spec["strategies"])
    if needs_judge(spec):
        per_q_strategy["generation"] = 1
    if "answer" in groups:
        per_q_strategy["relevancy"] = 1
        per_q_strategy["faithfulness"] = 2
    if "wixqa" in groups:
        per_q_strategy["wixqa"] = 2
    if "rageval" in groups:
        per_q_strategy["rageval_labels"] = 1
    if "ragxplain" in groups:
        per_q_strategy["ragxplain"] = len(ragxplain.METRICS)
    calls = {k: v * n_questions * n_strat for k, v in per_q_strategy.items()}
    if "lfs" in spec["strategies"]:
        calls["lfs_selection"] = n_domains * n_questions
    if "rageval" in groups:
        calls["rageval_key_points"] = n_questions
    if "ragxplain" in groups:
        calls["ragxplain_insights"] = n_strat
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
def _outcome_map(record: dict[str, Any], name: str, outcome: Outcome, judge: Judge | None) -> None:
    record["metrics"][name] = outcome.value
    d = outcome.as_dict()
    if judge is not None and outcome.kind != "skipped":
        d["judge"] = judge.name
    record["outcomes"][name] = d


def evaluate_question(
    pipeline, judge: Judge | None, spec: dict[str, Any], q: dict[str, Any], position: int, strategy: str,  # noqa: ANN001
    prepared, key_points: Callable[[], Outcome] | None = None,  # noqa: ANN001
) -> dict[str, Any]:
    """Retrieve (and answer, and judge) one question with one strategy; returns its record."""
    top_k = spec["top_k"]
    seed = (spec["seed"] + position) if spec.get("seed") is not None else None
    t0 = time.perf_counter()
    ret = pipeline.retrieve(q["query"], top_k=top_k, seed=seed, gate_mode=spec["gate"], strategy=strategy, prepared=prepared)
    ranked = [h.passage.doc_id for h in ret.hits]
    gold = q.get("gold_doc_ids") or []
    domains = q.get("domains") or []
    oos = answers.is_out_of_scope(q)
    record: dict[str, Any] = {
        "qid": q["qid"], "query": q["query"], "domains": domains,
        "kind": "oos" if oos else "cross" if len(domains) > 1 else "uni",
        "strategy": strategy, "position": position, "gold_doc_ids": gold,
        "ranking": [{"doc_id": h.passage.doc_id, "domain": h.passage.domain, "title": h.passage.title,
                     "score": round(h.score, 6), "unified_score": round(h.unified_score, 6)} for h in ret.hits],
        "active_domains": ret.routing.active_domains, "fallback": ret.routing.fallback,
        "probabilities": ret.routing.probabilities,
        "metrics": {}, "outcomes": {},
    }
    if ret.routing.selector:
        record["selector"] = {k: v for k, v in ret.routing.selector.items() if k != "errors"}
        record["selector"]["errors"] = list(ret.routing.selector.get("errors", {}).values())[:3]
    groups = spec["metrics"]
    if "retrieval" in groups:
        m = record["metrics"]
        m["acc_at_top1"] = acc_at_top1(ranked, gold)
        m[f"recall_at_{top_k}"] = recall_at_k(ranked, gold, top_k)
        m["mrr"] = mrr(ranked, gold)
        m["routing_accuracy"] = routing_accuracy(ret.routing.active_domains, domains)
        m["routing_exact"] = routing_exact(ret.routing.active_domains, domains)
        m["domains_searched"] = float(len(ret.routing.active_domains))
    if "rageval" in groups:
        record["metrics"]["retrieval_recall"] = recall_at_k(ranked, gold, top_k)
        record["metrics"]["eir"] = effective_information_rate([(h.passage.doc_id, h.passage.text) for h in ret.hits], gold)

    if needs_answers(spec):
        ans = pipeline.answer_retrieval(ret, query_vector=getattr(prepared, "vector", None), context_passages=top_k)
        answer, mode = ans.text, ans.mode.value
        record.update(answer=answer, answer_mode=mode, answer_error=ans.error, generate_ms=ans.timings_ms["answer"],
                      confidence=None if ans.confidence is None else ans.confidence.__dict__)
        if "answers" in groups:
            record["metrics"].update(answers.scores(answer, mode, q.get("answer"), out_of_scope=oos,
                                                    answer_ms=ans.timings_ms["answer"]))
    if needs_judge(spec):
        context = [(h.passage.title, h.passage.text) for h in ret.hits[:top_k]]
        reference = q.get("answer")
        if judge is None:
            raise EvaluationError("judge metrics need a judge")
        if not answer:  # scored 0 without asking the judge; context recall does not depend on the answer
            _no_answer(record, [n for n in judged_metric_names(spec) if n != "context_recall"], mode)
            if "wixqa" in groups:
                record["metrics"].update(wixqa.lexical(answer, reference))
                _outcome_map(record, "context_recall", wixqa.context_recall(judge, reference, context), judge)
            groups = [g for g in groups if g not in JUDGED_GROUPS]
        if "answer" in groups:
            _outcome_map(record, "relevancy", relevancy(judge, q["query"], answer), judge)
            _outcome_map(record, "faithfulness", faithfulness(judge, q["query"], answer, context), judge)
        if "wixqa" in groups:
            record["metrics"].update(wixqa.lexical(answer, reference))
            _outcome_map(record, "context_recall", wixqa.context_recall(judge, reference, context), judge)
            _outcome_map(record, "factuality", wixqa.factuality(judge, q["query"], answer, reference), judge)
        if "rageval" in groups:
            kp = key_points() if key_points else Outcome.skipped("no key points")
            if kp.value is None:
                for n in RAGEVAL_JUDGED:
                    _outcome_map(record, n, Outcome(None, error=f"key points: {kp.error}", kind=kp.kind or "skipped"), None)
            else:
                outs, calls = rageval.judge_keypoints(judge, q["query"], answer, kp.detail["key_points"])
                for n, o in outs.items():
                    o.calls = calls if n == "completeness" else 0
                    _outcome_map(record, n, o, judge)
                record["key_points"] = kp.detail["key_points"]
        if "ragxplain" in groups:
            for n, o in ragxplain.evaluate(judge, q["query"], answer, context, reference, q.get("grading_note")).items():
                _outcome_map(record, n, o, judge)
    record["ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return record


# --------------------------------------------------------------------------- a job
def run_job(
    pipeline, judge: Judge | None, store: JobStore, job_id: str, *,  # noqa: ANN001
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
            cached = store.cache_get(job_id, f"keypoints:{q['qid']}")
            if cached is not None:
                return Outcome(cached["value"], error=cached["error"], kind=cached["kind"], detail=cached.get("detail") or {})
            out = rageval.extract_keypoints(judge, q["query"], q.get("answer"))
            store.cache_set(job_id, f"keypoints:{q['qid']}", out.as_dict())
            return out
        return get

    def one(position: int, q: dict[str, Any], prepared) -> None:  # noqa: ANN001
        for strategy in [s for s in strategies if (s, q["qid"]) not in done]:
            if should_stop():
                return
            record = evaluate_question(pipeline, judge, spec, q, position, strategy, prepared,
                                       key_points_for(q) if "rageval" in spec["metrics"] else None)
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
                for (i, q), prep in zip(window, prepared):
                    one(i, q, prep)
            else:
                for f in [pool.submit(one, i, q, prep) for (i, q), prep in zip(window, prepared)]:
                    f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    if should_stop():
        return None
    records = store.results(job_id)
    insights = None
    if "ragxplain" in spec["metrics"]:
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
def _kind(q: dict[str, Any]) -> str:
    return "oos" if answers.is_out_of_scope(q) else "cross" if len(q.get("domains") or []) > 1 else "uni"


def groups_of(record: dict[str, Any]) -> list[str]:
    return ["all", record["kind"]] + [f"domain:{d}" for d in record.get("domains", [])]


def _group_order(names: Iterable[str]) -> list[str]:
    head = [g for g in ("all", "uni", "cross", "oos") if g in names]
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
    n_by_group = Counter(g for q in queries for g in groups_of({**q, "kind": _kind(q)}))
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
    if needs_answers(spec):
        summary["answers"] = answers.summarize_answers(spec["strategies"], records)
        summary["notes"].append("a missing answer scores 0 (a failure of the system), never a judge failure")
    if judged or needs_answers(spec):
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
def load_dataset(name: str, home) -> list[dict[str, Any]]:  # noqa: ANN001 - Path
    """Questions of a named dataset: ``demo`` (shipped), or ``$FEDQA_HOME/eval/datasets/NAME.jsonl``."""
    from pathlib import Path

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


def write_outputs(out, summary: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, str]:  # noqa: ANN001
    """summary.json, results.jsonl (one record per strategy and question) and report.html in ``out``."""
    import json
    from pathlib import Path

    from service.evaluation.report import render

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    with (out / "results.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (out / "report.html").write_text(render(summary, records), encoding="utf-8")
    return {k: str(out / f) for k, f in (("summary", "summary.json"), ("results", "results.jsonl"), ("report", "report.html"))}


# --------------------------------------------------------------------------- command line
def _split(text: str) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))


def _print_table(summary: dict[str, Any], out) -> None:  # noqa: ANN001
    """A short human table of the headline metrics (to stderr)."""
    metrics = [m for m in ("acc_at_top1", f"recall_at_{summary['spec']['top_k']}", "mrr", "answer_f1", "answer_rouge_l",
                           "false_refusal", "abstained", "relevancy", "faithfulness")
               if m in summary["metrics"]]
    groups = [g for g in ("all", "uni", "cross", "oos") if g in summary["n_by_group"]]
    print(f"{'strategy':<9}{'group':<7}{'n':>5}" + "".join(f"{m:>14}" for m in metrics), file=out)
    for s, per in summary["results"].items():
        for g in groups:
            if g in per:
                vals = "".join(f"{'-' if per[g][m] is None else format(per[g][m], '.3f'):>14}" for m in metrics)
                print(f"{s:<9}{g:<7}{summary['n_by_group'][g]:>5}{vals}", file=out)


def evaluate_cli(args, settings) -> int:  # noqa: ANN001 - argparse.Namespace, Settings
    """``fedqa evaluate``: run (or resume, or dry-run) a job in-process and write its outputs."""
    import json
    import sys

    from service.artifacts import Registry
    from service.schemas import EvalSpec

    store = JobStore.for_home(settings.home_dir)
    if args.resume:
        job = store.get(args.resume)
        if job is None:
            raise EvaluationError(f"no evaluation job {args.resume} in {settings.home_dir}")
        job_id, spec, n = args.resume, job["spec"], len(store.queries(args.resume))
    else:
        spec = EvalSpec(strategies=_split(args.strategies), metrics=_split(args.metrics), top_k=args.top_k,
                        gate=args.gate, seed=args.seed).model_dump()
        if args.queries:
            from pathlib import Path

            from service.queries import load_queries

            files = [args.queries] if isinstance(args.queries, str) else list(args.queries)
            queries = [query_record(q) for f in files for q in load_queries(f)]
            dataset = "+".join(Path(f).name for f in files)
        else:
            queries, dataset = load_dataset(args.dataset, settings.home_dir), args.dataset
        if args.limit:
            queries = queries[: args.limit]
        n = len(queries)
        if args.dry_run:
            domains = (Registry(settings.home_dir).active_manifest("index") or {}).get("domains", {})
            print(json.dumps({"dry_run": True, "dataset": dataset, "spec": spec,
                              "plan": plan(spec, n, len(domains), settings.judge_retries)}, indent=2))
            return 0
        job_id = None
    from service.pipeline import load_pipeline

    pipeline = load_pipeline(settings, with_llm=needs_llm(spec))
    try:
        judge = None
        if needs_judge(spec):
            from service.evaluation.judges import open_judge

            judge = open_judge(settings, pipeline.llm)
            if judge is None:
                raise EvaluationError("judge metrics need a judge: set FEDQA_JUDGE_BASE_URL or an LLM backend")
        if job_id is None:
            job_id = create_job(store, spec, queries, dataset)
        owner = f"{os.getpid()}:cli"
        if not store.claim(job_id, owner):
            raise EvaluationError(f"job {job_id} is being run by another process")
        print(f"evaluation job {job_id}: {n} questions x {len(spec['strategies'])} strategies "
              f"(gate {spec['gate']}); resume with: fedqa evaluate --resume {job_id}", file=sys.stderr)
        bar = None
        if not args.quiet:
            from tqdm import tqdm

            bar = tqdm(total=n * len(spec["strategies"]), unit="q", desc="evaluate", file=sys.stderr)

        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar.n = done
                bar.refresh()

        try:
            summary = run_job(pipeline, judge, store, job_id, progress=progress)
        finally:
            if bar is not None:
                bar.close()
            store.release(job_id, owner)
    finally:
        pipeline.close()
    if summary is None:
        return 1
    if args.out:
        paths = write_outputs(args.out, summary, store.results(job_id))
        print(f"wrote {paths['summary']}, {paths['results']}, {paths['report']}", file=sys.stderr)
    _print_table(summary, sys.stderr)
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return 0
