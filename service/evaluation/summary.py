"""The summary of an evaluation job: means per strategy and group, 95% intervals, counts, failures.

Groups of the summary: ``all``; ``uni``, ``cross`` (a question with more than one domain) or ``oos`` (out of
scope: no domain and no gold passage);
``domain:<name>`` for each domain a question belongs to (a cross question counts in each of its domains).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from service.evaluation import answers, ragxplain
from service.evaluation.groups import judged_metric_names, metric_names, needs_answers
from service.evaluation.judges import Judge
from service.evaluation.record import QuestionKind, QuestionRecord
from service.evaluation.stats import group_means, mean_ci
from service.schemas import EvalQuery, EvalSpec


def kind_of(q: EvalQuery) -> QuestionKind:
    """``oos``, ``cross`` or ``uni``: the summary group of a question by its labels."""
    return "oos" if answers.is_out_of_scope(q) else "cross" if len(q.domains) > 1 else "uni"


def groups_of(record: QuestionRecord) -> list[str]:
    """The summary groups a question's record counts in."""
    return ["all", record.kind] + [f"domain:{d}" for d in record.domains]


def question_groups(q: EvalQuery) -> list[str]:
    """The summary groups a question counts in (those its records count in)."""
    return ["all", kind_of(q)] + [f"domain:{d}" for d in q.domains]


def _group_order(names: Iterable[str]) -> list[str]:
    head = [g for g in ("all", "uni", "cross", "oos") if g in names]
    return head + sorted(g for g in names if g.startswith("domain:"))


def _means(by_group: dict[str, list[QuestionRecord]], names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(means, 95% intervals, counts) of each metric in each group of one strategy's records."""
    aggs = group_means({g: [r.metrics for r in by_group[g]] for g in _group_order(by_group)}, names, digits=6)
    results = {g: {m: a["mean"] for m, a in per.items()} for g, per in aggs.items()}
    ci95 = {g: {m: a["ci95"] for m, a in per.items()} for g, per in aggs.items()}
    counts = {g: {"questions": len(by_group[g]), **{m: a["n"] for m, a in per.items()}} for g, per in aggs.items()}
    return results, ci95, counts


def _failures(records: Iterable[QuestionRecord]) -> dict[str, dict[str, int]]:
    """Failed judge calls by metric and kind, and failed lfs votes, over one strategy's records."""
    fails: dict[str, Counter[str]] = {}
    for r in records:
        for m, o in r.outcomes.items():
            if o.kind:
                fails.setdefault(m, Counter())[o.kind] += 1
        if r.selector is not None and r.selector.failures:
            fails.setdefault("lfs_selection", Counter())["call_or_parse"] += r.selector.failures
    return {m: dict(c) for m, c in fails.items()}


def _extras(spec: EvalSpec, records: Sequence[QuestionRecord], versions: dict[str, Any], judged: bool) -> dict[str, Any]:
    """Answer quality and modes per strategy (when answers were made) and the lfs selector's record."""
    out: dict[str, Any] = {}
    if needs_answers(spec):
        out["answers"] = answers.summarize_answers(spec.strategies, records)
    if judged or needs_answers(spec):
        modes: dict[str, Counter[str]] = {}
        for r in records:
            modes.setdefault(str(r.strategy), Counter())[str(r.answer_mode or "none")] += 1
        out["answer_modes"] = {s: dict(c) for s, c in modes.items()}
    if "lfs" in spec.strategies:
        lfs = [r for r in records if r.strategy == "lfs"]
        out["lfs"] = {
            "llm": versions.get("llm"),
            "failed_votes": sum(r.selector.failures or 0 for r in lfs if r.selector is not None),
            "fallbacks": sum(1 for r in lfs if r.fallback),
            "questions": len(lfs),
        }
    return out


# The shipped demo's questions are the ones its home was fitted on (fedqa demo / serve --demo).
IN_SAMPLE_DEMO = (
    "in-sample: the demo's router was trained on 70% of these questions and calibrated on the rest, and its answer "
    "policy and not-covered decision were fitted on all of them, so these figures overstate quality on new questions "
    "(evaluate questions kept out of training for a held-out estimate)"
)


def summarize(
    spec: EvalSpec,
    queries: Sequence[EvalQuery],
    records: Sequence[QuestionRecord],
    *,
    dataset: str,
    job_id: str | None = None,
    versions: dict[str, Any] | None = None,
    insights: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The job's summary: means per strategy and group, 95% intervals, counts and failures."""
    names = metric_names(spec)
    judged = set(judged_metric_names(spec))
    by: dict[str, dict[str, list[QuestionRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for g in groups_of(r):
            by[str(r.strategy)][g].append(r)
    results, ci95, counts, failures = {}, {}, {}, {}
    for s in spec.strategies:
        results[s], ci95[s], counts[s] = _means(by[s], names)
        failures[s] = _failures(by[s]["all"])
    n_by_group = Counter(g for q in queries for g in question_groups(q))
    judge_names = sorted({r.judge for r in records if r.judge})
    judge_calls = sum(o.calls for r in records for o in r.outcomes.values())
    summary: dict[str, Any] = {
        "dataset": dataset,
        "n": len(queries),
        "results": results,
        "ci95": ci95,
        "counts": counts,
        "n_by_group": {g: n_by_group[g] for g in _group_order(n_by_group)},
        "failures": failures,
        "metrics": names,
        "spec": {k: getattr(spec, k) for k in ("strategies", "metrics", "top_k", "gate", "seed", "domains")},
        "notes": [
            f"gate: {spec.gate}" + (f" (seed {spec.seed} + question index)" if spec.seed is not None else ""),
            "a question with more than one domain counts as cross, and in each of its domains",
            "failed judge calls are counted in 'failures' and left out of the means, never scored 0",
            *(["a missing answer scores 0 (a failure of the system), never a judge failure"] if needs_answers(spec) else []),
            *([IN_SAMPLE_DEMO] if dataset == "demo" else []),
        ],
        "judge": {"model": ", ".join(judge_names) or None, "metrics": sorted(judged), "llm_calls": judge_calls} if judged else None,
        "versions": versions or {},
        "job": job_id,
    }
    summary.update(_extras(spec, records, versions or {}, bool(judged)))
    if insights is not None:
        summary["insights"] = insights
    return summary


def strategy_insights(judge: Judge | None, strategy: str, records: Sequence[QuestionRecord]) -> dict[str, Any]:
    """RAGXplain's dataset-level insights and action items for one strategy's records."""
    means = {m: mean_ci([r.metrics.get(m) for r in records])["mean"] for m in ragxplain.METRICS}
    low: list[tuple[float, str]] = []
    for r in records:
        for m in ragxplain.METRICS:
            o = r.outcomes.get(m)
            if o is not None and o.value is not None and o.explanation:
                low.append((o.value, f"{m} = {o.value:.1f} on '{r.query[:80]}': {o.explanation[:200]}"))
    low.sort(key=lambda t: t[0])
    return ragxplain.insights(judge, strategy, means, len(records), [e for _, e in low[:8]])
