"""Learning from use (issue 49): a simulated curator confirms half of the held-out questions; the other half is
scored before, online (the feedback served at once) and after ``fedqa refresh``.

    python benchmarks/learning.py --home ~/fedqa-faq6 --work /tmp/learn --in-scope $DATA/val.jsonl \
        --labelled ../shared/data/faq6/queries_dev.jsonl ../shared/data/faq6/cross_dev.jsonl \
        --refresh-oos ../shared/data/oos_dev.jsonl \
        --oos ../shared/data/oos_family_dev.jsonl --named ../shared/data/oos_family_dev_named.jsonl \
        --fractions 0 100 --wrong 0.2 --out learning.json

``--home`` is never written: it is copied under ``--work`` (a copy for the "before" and online pipeline, and one per
refreshed condition). The held-out in-scope questions (``--in-scope``) and every out-of-scope product's questions
(``--oos``, with a ``product`` field) are split in two halves A and B by ``--seed``; both directions run (A the
traffic and B the test, then B->A), so every question is tested once. One out-of-scope product (``--leave-out``,
default the first by name) sends no traffic: its questions show what does not transfer.

The curator (a trusted key, :func:`service.feedback.review.confirmation` stored with
:meth:`~service.feedback.store.FeedbackStore.confirm`, as ``fedqa feedback confirm`` and ``POST
/admin/feedback/confirm`` store it) sees the 5 passages the "before" service showed for each traffic question (``/ask``'s
path, :func:`service.ask.answer`, deterministic gate, no LLM): it confirms the gold passage when one was shown, else rates
the first shown passage "down" (a trusted ``POST /feedback``); an out-of-scope question is confirmed "not covered".
``--fractions``: the share of the traffic half sent (a nested prefix of it, per product for the out-of-scope ones).
``--wrong P``: the full traffic again with a share P of the confirmations wrong (a random shown passage that is not
gold; an out-of-scope question confirmed with a random shown passage instead of "not covered").

Scored on the test half: ``acc1`` (the first source is a gold passage), ``refused`` (in-scope questions answered "not
covered"), ``nc_marked`` (out-of-scope test questions of the products whose other questions were sent "not covered"
by the traffic: with 0 traffic, the same products), ``nc_marked_named`` (those naming their product), ``nc_left_out``
(every question of the left-out product). Stages: ``before`` (no feedback), ``online`` (the same pipeline after
:func:`service.loading.learn_feedback`, as the service after each stored feedback) and ``refresh`` (``fedqa refresh
--queries LABELLED --out-of-scope REFRESH_OOS`` on a copy holding the feedback: the questions flow, the router retrained
as a head over the index's retriever with the reranker, answer policy, split and "not covered" refitted, reading the
feedback; then a freshly loaded pipeline that also serves the feedback online). ``LABELLED`` is ``--labelled`` minus
the ``--in-scope`` questions (the home's training labelled questions). The refresh with no feedback is the same in both
directions and runs once. Refreshing changes the router's training set (labelled questions only, no synthetic ones), so
a refreshed condition is compared with the 0-traffic refresh, not with "before".

Figures measured on a README-defaults faq6 home (the command above, 2026-11-29, 2 cores at load 4-6), and which of
issue 49's targets they meet: docs/guides/feedback.md, "Measured: what feedback changes on faq6".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.queries import LabelledQuery, load_files  # noqa: E402

TOP_K = 5
CURATOR = "curator:benchmark"


@dataclass(frozen=True)
class Shown:
    """What the service answered one question: its sources (doc_id, product) in order, and whether it refused."""

    sources: tuple[tuple[str, str], ...]
    refused: bool


@dataclass
class Split:
    """One direction: the traffic and test questions (in scope, and out of scope by product)."""

    name: str
    traffic_in: list[LabelledQuery]
    test_in: list[LabelledQuery]
    traffic_oos: dict[str, list[LabelledQuery]]
    test_oos: dict[str, list[LabelledQuery]]
    left_out: list[LabelledQuery] = field(default_factory=list)


def halves(items: list[LabelledQuery], seed: int) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """``items`` shuffled by ``seed`` and cut in two."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return order[: len(order) // 2], order[len(order) // 2 :]


def splits(in_scope: list[LabelledQuery], oos: dict[str, list[LabelledQuery]], left_out: str, seed: int) -> list[Split]:
    """A->B and B->A."""
    a_in, b_in = halves(in_scope, seed)
    cut = {p: halves(qs, seed) for p, qs in oos.items() if p != left_out}
    rest = oos.get(left_out, [])
    return [
        Split("A->B", a_in, b_in, {p: c[0] for p, c in cut.items()}, {p: c[1] for p, c in cut.items()}, rest),
        Split("B->A", b_in, a_in, {p: c[1] for p, c in cut.items()}, {p: c[0] for p, c in cut.items()}, rest),
    ]


def ask_all(pipeline, questions: list[LabelledQuery]) -> dict[str, Shown]:  # noqa: ANN001
    """Every question through ``/ask``'s path (no LLM: extractive answers, deterministic gate)."""
    from service.ask import answer
    from service.generation.modes import AnswerMode
    from service.schemas import AskRequest

    out = {}
    for q in questions:
        resp = answer(pipeline, AskRequest(query=q.query, top_k=TOP_K, gate="deterministic"))
        out[q.qid] = Shown(tuple((s.doc_id, s.domain) for s in resp.sources[:TOP_K]), resp.answer_mode == AnswerMode.NOT_COVERED)
    return out


def send_traffic(
    home: Path, split: Split, shown: dict[str, Shown], fraction: float, wrong: float, seed: int, index_version: str | None
) -> dict[str, int]:
    """The curator's feedback on the first ``fraction`` of the traffic, stored in ``home``'s feedback database;
    what it sent, counted."""
    from service.config import Settings
    from service.feedback.review import confirmation
    from service.feedback.store import FeedbackBounds, FeedbackStore, Rating, Vote

    settings = Settings(home=home)
    store, bounds = FeedbackStore(settings.feedback_path), FeedbackBounds.of(settings)
    rng = random.Random(seed * 7919 + 1)
    sent: dict[str, int] = defaultdict(int)

    def verdict(q: LabelledQuery, passages: dict[str, str], not_covered: bool) -> None:
        store.confirm(
            confirmation(q.query, passages, not_covered=not_covered, curator=CURATOR, key_products=None, index_version=index_version), bounds
        )

    def maybe_wrong(q: LabelledQuery, gold: set[str]) -> bool:
        others = [(d, p) for d, p in shown[q.qid].sources if d not in gold]
        if wrong <= 0 or not others or rng.random() >= wrong:
            return False
        doc, product = rng.choice(others)
        verdict(q, {doc: product}, False)
        sent["wrong"] += 1
        return True

    for q in split.traffic_in[: round(fraction * len(split.traffic_in))]:
        gold = set(q.gold_doc_ids)
        hits = {d: p for d, p in shown[q.qid].sources if d in gold}
        if hits:
            if not maybe_wrong(q, gold):
                verdict(q, hits, False)
                sent["confirmed"] += 1
        elif shown[q.qid].sources:
            doc, product = shown[q.qid].sources[0]
            vote = Vote(q.query, CURATOR, None, True, index_version, rating=Rating.DOWN, doc_id=doc, domain=product)
            store.record(vote, bounds)
            sent["down"] += 1
    for qs in split.traffic_oos.values():
        for q in qs[: round(fraction * len(qs))]:
            if not maybe_wrong(q, set()):
                verdict(q, {}, True)
                sent["not_covered"] += 1
    return dict(sent)


def scores(split: Split, shown: dict[str, Shown], named: set[str]) -> dict[str, float | int | None]:
    """The test half's figures (module doc)."""
    marked = [q for qs in split.test_oos.values() for q in qs]
    marked_named = [q for q in marked if q.qid in named]

    def share(qs: list[LabelledQuery], hit) -> float | None:  # noqa: ANN001
        return round(sum(hit(q) for q in qs) / len(qs), 4) if qs else None

    first = {qid: s.sources[0][0] if s.sources else None for qid, s in shown.items()}
    return {
        "in_scope": len(split.test_in),
        "acc1": share(split.test_in, lambda q: first[q.qid] in q.gold_doc_ids),
        "refused": share(split.test_in, lambda q: shown[q.qid].refused),
        "marked": len(marked),
        "nc_marked": share(marked, lambda q: shown[q.qid].refused),
        "marked_named": len(marked_named),
        "nc_marked_named": share(marked_named, lambda q: shown[q.qid].refused),
        "left_out": len(split.left_out),
        "nc_left_out": share(split.left_out, lambda q: shown[q.qid].refused),
    }


def tested(split: Split) -> list[LabelledQuery]:
    return [*split.test_in, *(q for qs in split.test_oos.values() for q in qs), *split.left_out]


def copy_home(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def refresh(home: Path, queries: Path, oos: list[str], log: Path) -> dict:
    """``fedqa refresh --queries QUERIES --out-of-scope OOS`` on ``home`` (its output in ``log``); what it said."""
    env = {**os.environ, "FEDQA_HOME": str(home)}
    cmd = [sys.executable, "-m", "service.cli", "refresh", "--queries", str(queries), "--out-of-scope", *oos, "--quiet"]
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=True, cwd=Path(__file__).resolve().parents[1])
    said = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith(("feedback:", "activated together"))]
    return {"seconds": round(time.perf_counter() - t0, 1), "said": said}


def measure(home: Path, questions: list[LabelledQuery], *, learn: bool) -> tuple[dict[str, Shown], dict]:
    """Load ``home``'s active versions (serving its feedback when ``learn``, as the service does at its start), ask."""
    from service.config import Settings
    from service.loading import learn_feedback, load_pipeline

    settings = Settings(home=home)
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        if learn:
            learn_feedback(pipeline, settings)
        return ask_all(pipeline, questions), pipeline.versions
    finally:
        pipeline.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="the measured home (copied, never written)")
    ap.add_argument("--work", type=Path, required=True, help="where the copies go")
    ap.add_argument("--in-scope", nargs="+", required=True, help="held-out in-scope questions (the home's val.jsonl)")
    ap.add_argument("--labelled", nargs="+", required=True, help="every labelled question; minus --in-scope: the refresh's --queries")
    ap.add_argument("--refresh-oos", nargs="*", default=[], help="the refresh's --out-of-scope files")
    ap.add_argument("--oos", nargs="+", required=True, help="out-of-scope questions with a 'product' field (traffic and test)")
    ap.add_argument("--named", nargs="*", default=[], help="the out-of-scope questions that name their product (qids)")
    ap.add_argument("--leave-out", default=None, help="the out-of-scope product that sends no traffic (default: the first by name)")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0, 25, 50, 100], help="traffic sent, percent")
    ap.add_argument("--wrong", type=float, default=0.0, help="also the full traffic with this share of confirmations wrong")
    ap.add_argument("--no-refresh", action="store_true", help="before and online only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    in_scope = [q for q in load_files(args.in_scope) if q.domains]
    held = {q.qid for q in in_scope}
    train = [q for q in load_files(args.labelled) if q.domains and q.qid not in held]
    train_path = args.work / "refresh_queries.jsonl"
    from service.feedback.review import write_queries

    write_queries(train_path, train)
    products = {}
    for path in args.oos:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                products[str(rec["qid"])] = str(rec.get("product", "?"))
    oos: dict[str, list[LabelledQuery]] = defaultdict(list)
    for q in load_files(args.oos):
        oos[products[q.qid]].append(q)
    left_out = args.leave_out or sorted(oos)[0]
    named = {q.qid for q in load_files(args.named)} if args.named else set()
    directions = splits(in_scope, dict(oos), left_out, args.seed)
    conditions = [(f / 100.0, 0.0) for f in args.fractions] + ([(1.0, args.wrong)] if args.wrong > 0 else [])

    base = copy_home(args.home, args.work / "base")
    everything = [*in_scope, *(q for qs in oos.values() for q in qs)]
    before, versions = measure(base, everything, learn=False)
    print(f"before: {len(everything)} questions asked ({time.perf_counter() - t_start:.0f} s)", flush=True)

    from service.config import Settings
    from service.loading import learn_feedback, load_pipeline

    rows: list[dict] = []

    def save() -> None:  # after each condition: a run stopped early keeps what it measured
        if args.out:
            meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
            out = {"versions": versions, "left_out": left_out, "refresh_queries": len(train), "rows": rows, **meta}
            Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")

    refreshed_none: dict[str, Shown] | None = None
    for split in directions:
        for fraction, wrong in conditions:
            label = f"{fraction * 100:.0f}%" + (f", {wrong * 100:.0f}% wrong" if wrong else "")
            home = args.work / f"{split.name.replace('->', '')}-{fraction * 100:.0f}-{wrong * 100:.0f}"
            copy_home(base, home)
            sent = send_traffic(home, split, before, fraction, wrong, args.seed, versions.get("index"))
            row = {"direction": split.name, "traffic": fraction, "wrong": wrong, "sent": sent}
            rows.append({**row, "stage": "before", **scores(split, before, named)})
            if fraction == 0:
                online = before
            else:
                settings = Settings(home=home)
                pipeline = load_pipeline(settings, with_llm=False)
                try:
                    learn_feedback(pipeline, settings)
                    online = ask_all(pipeline, tested(split))
                finally:
                    pipeline.close()
            rows.append({**row, "stage": "online", **scores(split, online, named)})
            save()
            print(f"{split.name} {label}: sent {sent}; online measured ({time.perf_counter() - t_start:.0f} s)", flush=True)
            if args.no_refresh:
                shutil.rmtree(home, ignore_errors=True)
                continue
            if fraction == 0 and refreshed_none is not None:
                after = refreshed_none
                row["refresh"] = "the 0-traffic refresh of the first direction (the same inputs)"
            else:
                row["refresh"] = refresh(home, train_path, args.refresh_oos, home.with_name(home.name + ".refresh.log"))
                after, _ = measure(home, everything if fraction == 0 else tested(split), learn=True)
                if fraction == 0:
                    refreshed_none = after
            rows.append({**row, "stage": "refresh", **scores(split, after, named)})
            print(f"{split.name} {label}: refreshed ({time.perf_counter() - t_start:.0f} s)", flush=True)
            shutil.rmtree(home, ignore_errors=True)
            save()
    _print(rows, left_out)
    save()
    return 0


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _print(rows: list[dict], left_out: str) -> None:
    head = f"{'direction':<10}{'traffic':>8}{'wrong':>7}{'stage':>9}{'n':>5}{'acc1':>8}{'refused':>9}{'n oos':>7}{'nc marked':>11}{'named':>8}"
    print(f"\n{head}{'nc ' + left_out:>16}")
    for r in rows:
        print(
            f"{r['direction']:<10}{r['traffic'] * 100:>7.0f}%{r['wrong'] * 100:>6.0f}%{r['stage']:>9}{r['in_scope']:>5}{_fmt(r['acc1']):>8}"
            f"{_fmt(r['refused']):>9}{r['marked']:>7}{_fmt(r['nc_marked']):>11}{_fmt(r['nc_marked_named']):>8}{_fmt(r['nc_left_out']):>16}"
        )
    pooled: dict[tuple[float, float, str], list[dict]] = defaultdict(list)
    for r in rows:
        pooled[(r["traffic"], r["wrong"], r["stage"])].append(r)
    print("\nboth directions pooled (every held-out question tested once):")
    print(f"{'traffic':>8}{'wrong':>7}{'stage':>9}{'n':>5}{'acc1':>8}{'refused':>9}{'n oos':>7}{'nc marked':>11}{'named':>8}")
    for (traffic, wrong, stage), rs in pooled.items():

        def mean(key: str, weight: str, rs: list[dict] = rs) -> float | None:
            n = sum(r[weight] for r in rs if r[key] is not None)
            return sum(r[key] * r[weight] for r in rs if r[key] is not None) / n if n else None

        n_in, n_oos = sum(r["in_scope"] for r in rs), sum(r["marked"] for r in rs)
        print(
            f"{traffic * 100:>7.0f}%{wrong * 100:>6.0f}%{stage:>9}{n_in:>5}{_fmt(mean('acc1', 'in_scope')):>8}{_fmt(mean('refused', 'in_scope')):>9}"
            f"{n_oos:>7}{_fmt(mean('nc_marked', 'marked')):>11}{_fmt(mean('nc_marked_named', 'marked_named')):>8}"
        )


if __name__ == "__main__":
    sys.exit(main())
