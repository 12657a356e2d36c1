"""The self-contained HTML report of an evaluation: bar charts (inline SVG, no scripts or external
files), a table per strategy and group with 95% intervals, a per-domain table, failures, RAGXplain
insights and the worst questions with their explanations.

The charts follow the MKP-QA paper's Figures 2 and 3: one chart per metric, uni-domain and
cross-domain questions side by side, one bar per strategy, with the 95% interval as a whisker.
"""

from __future__ import annotations

import html
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from service.evaluation.record import QuestionRecord

COLORS = {"mkpqa": "#1f77b4", "uis": "#ff7f0e", "rfs": "#2ca02c", "lfs": "#d62728"}
SCALE_10 = {"relevancy"}
NOT_CHARTED = {"domains_searched"}
LABELS = {
    "acc_at_top1": "Acc@Top1",
    "mrr": "MRR",
    "routing_accuracy": "Routing accuracy (all gold domains searched)",
    "routing_exact": "Routing exact (searched = gold domains)",
    "relevancy": "Relevancy (1-10)",
    "faithfulness": "Faithfulness",
}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f4f4f4} td.l,th.l{text-align:left} .meta{color:#555;font-size:13px} .charts{display:flex;flex-wrap:wrap;gap:12px}
.ci{color:#777;font-size:11px} .bad{color:#b00} .q{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:8px 0;font-size:13px}
.q .t{font-weight:600} code{background:#f6f6f6;padding:0 3px} .judge{font-size:12px;color:#555}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v: float | None, metric: str = "") -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if metric in SCALE_10 or metric == "domains_searched" else f"{v:.3f}"


def bar_chart(metric: str, summary: dict[str, Any], groups: Sequence[str], width: int = 360, height: int = 240) -> str:
    """An inline SVG grouped bar chart of one metric: x = groups, one bar per strategy, CI whiskers."""
    strategies = list(summary["results"])
    top = 10.0 if metric in SCALE_10 else 1.0
    left, right, top_pad, bottom = 40, 10, 34, 46
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    gw = plot_w / max(1, len(groups))
    bw = min(28.0, (gw - 16) / max(1, len(strategies)))

    def y(v: float) -> float:
        return top_pad + plot_h * (1 - max(0.0, min(v, top)) / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{_e(metric)}">',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13" font-weight="600">{_e(LABELS.get(metric, metric))}</text>',
    ]
    for i in range(5):
        v = top * i / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#666">{v:g}</text>')
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + (gw - bw * len(strategies)) / 2
        n = summary.get("n_by_group", {}).get(g)
        label = f"{g} (n={n})" if n is not None else g
        parts.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle" font-size="11">{_e(label)}</text>')
        for si, s in enumerate(strategies):
            v = summary["results"][s].get(g, {}).get(metric)
            x = x0 + si * bw
            if v is None:
                continue
            parts.append(
                f'<rect x="{x + 2:.1f}" y="{y(v):.1f}" width="{bw - 4:.1f}" height="{top_pad + plot_h - y(v):.1f}" '
                f'fill="{COLORS.get(s, "#888")}"><title>{_e(s)} {_e(g)}: {_fmt(v, metric)}</title></rect>'
            )
            lo, hi = summary.get("ci95", {}).get(s, {}).get(g, {}).get(metric) or [None, None]
            label_y = y(v)
            if lo is not None and hi is not None and hi > lo:
                cx = x + bw / 2
                parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(lo):.1f}" y2="{y(hi):.1f}" stroke="#333"/>')
                for yy in (y(lo), y(hi)):
                    parts.append(f'<line x1="{cx - 3:.1f}" x2="{cx + 3:.1f}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#333"/>')
                label_y = y(hi)
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{label_y - 3:.1f}" text-anchor="middle" font-size="9">{_fmt(v, metric)}</text>')
    if all(summary["results"][s].get(g, {}).get(metric) is None for s in strategies for g in groups):
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{top_pad + plot_h / 2:.1f}" text-anchor="middle" font-size="12" '
            f'fill="#b00">no value: every question failed or was skipped (see Failures)</text>'
        )
    lx = left
    for s in strategies:
        parts.append(f'<rect x="{lx}" y="{height - 18}" width="10" height="10" fill="{COLORS.get(s, "#888")}"/>')
        parts.append(f'<text x="{lx + 14}" y="{height - 9}" font-size="11">{_e(s)}</text>')
        lx += 60
    parts.append("</svg>")
    return "".join(parts)


def _results_table(summary: dict[str, Any], groups: Sequence[str]) -> str:
    metrics = [m for m in summary["metrics"]]
    judged = set((summary.get("judge") or {}).get("metrics") or [])
    head = "".join(f"<th>{_e(m)}{'*' if m in judged else ''}</th>" for m in metrics)
    rows = []
    for s, per in summary["results"].items():
        for g in groups:
            if g not in per:
                continue
            cells = []
            for m in metrics:
                v = per[g].get(m)
                lo, hi = summary.get("ci95", {}).get(s, {}).get(g, {}).get(m) or [None, None]
                ci = f'<br><span class="ci">[{_fmt(lo, m)}, {_fmt(hi, m)}]</span>' if lo is not None else ""
                cells.append(f"<td>{_fmt(v, m)}{ci}</td>")
            n = summary.get("counts", {}).get(s, {}).get(g, {}).get("questions", "")
            rows.append(f'<tr><td class="l">{_e(s)}</td><td class="l">{_e(g)}</td><td>{n}</td>{"".join(cells)}</tr>')
    return f'<table><tr><th class="l">strategy</th><th class="l">group</th><th>n</th>{head}</tr>{"".join(rows)}</table>'


def _domain_table(summary: dict[str, Any]) -> str:
    strategies = list(summary["results"])
    domains = sorted({g for per in summary["results"].values() for g in per if g.startswith("domain:")})
    metrics = [m for m in summary["metrics"] if m in ("acc_at_top1", "mrr", "relevancy", "faithfulness") or m.startswith("recall_at_")] or summary[
        "metrics"
    ][:3]
    head = "".join(f"<th>{_e(s)}<br>{_e(m)}</th>" for m in metrics for s in strategies)
    rows = []
    for d in domains:
        n = summary.get("n_by_group", {}).get(d, "")
        cells = "".join(f"<td>{_fmt(summary['results'][s].get(d, {}).get(m), m)}</td>" for m in metrics for s in strategies)
        rows.append(f'<tr><td class="l">{_e(d.removeprefix("domain:"))}</td><td>{n}</td>{cells}</tr>')
    return f'<table><tr><th class="l">domain</th><th>n</th>{head}</tr>{"".join(rows)}</table>'


def _failures(summary: dict[str, Any]) -> str:
    rows = []
    for s, per in (summary.get("failures") or {}).items():
        for m, kinds in per.items():
            rows.append(
                f'<tr><td class="l">{_e(s)}</td><td class="l">{_e(m)}</td>'
                f"<td>{kinds.get('parse', 0)}</td><td>{kinds.get('call', 0)}</td><td>{kinds.get('skipped', 0)}</td>"
                f"<td>{kinds.get('call_or_parse', 0)}</td></tr>"
            )
    if not rows:
        return "<p>No failed or skipped metric.</p>"
    return (
        '<table><tr><th class="l">strategy</th><th class="l">metric</th><th>parse failures</th><th>call failures</th>'
        f"<th>skipped</th><th>lfs votes failed</th></tr>{''.join(rows)}</table>"
    )


def _insights(summary: dict[str, Any]) -> str:
    ins = summary.get("insights")
    if not ins:
        return ""
    out = ["<h2>RAGXplain insights and action items</h2>"]
    for s, block in ins.items():
        src = block.get("source")
        by = f"judge {block.get('judge')}" if src == "judge" else f"fixed rules (judge failed: {block.get('error')})"
        out.append(f"<h3>{_e(s)} <span class='judge'>({_e(by)})</span></h3>")
        if block.get("insights"):
            out.append("<ul>" + "".join(f"<li>{_e(i)}</li>" for i in block["insights"]) + "</ul>")
        if block.get("actions"):
            out.append("<ol>" + "".join(f"<li><b>{_e(a.get('metric') or '')}</b> {_e(a.get('action'))}</li>" for a in block["actions"]) + "</ol>")
    return "".join(out)


def worst_questions(records: Sequence[QuestionRecord], limit: int = 15) -> list[list[QuestionRecord]]:
    """Questions ranked worst first (each one its records, one per strategy): most strategies with a wrong top-1, then
    the lowest judged scores."""
    by_q: dict[str, list[QuestionRecord]] = defaultdict(list)
    for r in records:
        by_q[r.qid].append(r)

    def badness(rs: list[QuestionRecord]) -> tuple[float, float]:
        wrong = sum(1 for r in rs if r.metrics.get("acc_at_top1") == 0.0)
        judged = [v for r in rs for m, v in r.metrics.items() if v is not None and m in ("relevancy", "faithfulness", "factuality", "completeness")]
        judged_norm = [v / 10 if v > 1 else v for v in judged]
        return (-wrong, sum(judged_norm) / len(judged_norm) if judged_norm else 1.0)

    ranked = sorted(by_q.values(), key=badness)
    out = []
    for rs in ranked[:limit]:
        if badness(rs) == (0, 1.0):
            break
        out.append(rs)
    return out


def _question(rs: list[QuestionRecord]) -> str:
    r0 = rs[0]
    parts = [
        f'<div class="q"><div class="t">{_e(r0.qid)}: {_e(r0.query)}</div>',
        f"<div>domains: <code>{_e(', '.join(r0.domains))}</code> · gold: <code>{_e(', '.join(r0.gold_doc_ids[:4]))}"
        f"{' ...' if len(r0.gold_doc_ids) > 4 else ''}</code></div><ul>",
    ]
    for r in rs:
        top = r.ranking[0] if r.ranking else None
        ok = r.metrics.get("acc_at_top1")
        mark = "" if ok is None else (" ✓" if ok == 1.0 else ' <span class="bad">✗</span>')
        line = (
            f"<li><b>{_e(r.strategy)}</b>{mark}: searched <code>{_e(', '.join(r.active_domains))}</code>; "
            f"top-1 <code>{_e(top.doc_id) if top else 'none'}</code>"
        )
        if r.selector is not None and r.selector.votes is not None:  # lfs only: the other strategies' selectors have no votes
            line += f" · lfs votes {_e(r.selector.votes)}"
        if r.answer is not None:
            line += f"<br>answer ({_e(r.answer_mode)}): {_e(r.answer[:300])}"
        for m, o in r.outcomes.items():
            if o.value is not None and o.explanation:
                line += f'<br><span class="judge">{_e(m)} = {_fmt(o.value, m)} ({_e(o.judge or "")}): {_e(o.explanation[:240])}</span>'
            elif o.kind:
                line += f'<br><span class="judge bad">{_e(m)}: {_e(o.kind)} failure: {_e((o.error or "")[:160])}</span>'
        parts.append(line + "</li>")
    parts.append("</ul></div>")
    return "".join(parts)


def render(summary: dict[str, Any], records: Sequence[QuestionRecord], *, title: str = "fedqa evaluation") -> str:
    """The whole report as one HTML string."""
    groups_present = {g for per in summary["results"].values() for g in per}
    chart_groups = [g for g in ("uni", "cross") if g in groups_present] or ["all"]
    table_groups = [g for g in ("all", "uni", "cross") if g in groups_present]
    charted = [m for m in summary["metrics"] if m not in NOT_CHARTED]
    judge = summary.get("judge") or {}
    meta = [
        f"dataset <b>{_e(summary['dataset'])}</b>, {summary['n']} questions",
        f"strategies {_e(', '.join(summary['results']))}",
        f"top-k {summary['spec']['top_k']}, gate {_e(summary['spec']['gate'])}",
        "versions " + _e(", ".join(f"{k}={v}" for k, v in (summary.get("versions") or {}).items())),
    ]
    if judge:
        metrics = ", ".join(judge.get("metrics", []))
        meta.append(f"* judged by <b>{_e(judge.get('model'))}</b> ({judge.get('llm_calls', 0)} judge calls): {_e(metrics)}")
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{"<br>".join(meta)}<br>generated {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}'
        f"{' · job ' + _e(summary['job']) if summary.get('job') else ''}</p>",
        "<h2>Uni-domain vs cross-domain</h2>",
        '<div class="charts">' + "".join(bar_chart(m, summary, chart_groups) for m in charted) + "</div>",
        "<h2>All metrics (mean, 95% bootstrap interval)</h2>",
        _results_table(summary, table_groups),
        "<h2>Per domain</h2>",
        _domain_table(summary),
        "<h2>Failures (counted, left out of the means)</h2>",
        _failures(summary),
        _insights(summary),
        "<h2>Worst questions</h2>",
        "".join(_question(q) for q in worst_questions(records)) or "<p>None: every question was answered correctly.</p>",
        '<p class="meta">' + "<br>".join(_e(n) for n in summary.get("notes", [])) + "</p>",
    ]
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>"
    )
