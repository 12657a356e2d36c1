"""manuals_dev: HTML manuals as published, ingested as a user would, scored by page and evidence span.

    python benchmarks/manuals.py --data ../shared/data/manuals_dev --home /tmp/fedqa-manuals [--labelled] [--out m.json]

Ingests ``DATA/docs`` (one folder per product) into ``--home`` with the default settings (an ingest of the same
input into the same home changes nothing), then asks every question of ``questions.jsonl``, ``cross.jsonl`` and ``oos.jsonl`` in-process
through the serving path (default strategy, deterministic gate, extractive answers) and scores, under the data's
rule (a passage answers when its page is a gold page and an evidence span is in it (a) or half of a span's words are
(b)) and under the strict rule (a) alone:

- Acc@1 (the first passage answers), gold page first, hit@5; for cross questions, both parts in the top 5;
- in-scope refusals (single and cross questions answered ``not_covered``), out-of-scope questions ``not_covered``
  (off-topic and neighbouring products apart), answer F1 (word overlap with the reference answer);
- the same rankings from **BM25 alone** (bm25s, stemming and English stop words, over title + text of the same
  passages; computed here, independently of the service) and **dense alone** (``FEDQA_LEXICAL=off``, strategy uis:
  every product searched, ranked by s);
- the mean passage length (words) beside every score, the share of passages that are mostly link labels (the
  page's ``<a href>`` texts, not matched inside its code blocks), and the share of extractive answers that begin
  and end on sentence or code-block boundaries.

``--labelled``: also the half-labelled condition: the single questions are split in two folds (by qid parity); for
each fold a copy of the home is fitted with ``fedqa refresh --queries`` (the README's own-documentation flow: router,
ranking model, answer policy, split, "not covered"; ``--labelled-with router``: ``fedqa train router --queries``, as
before 2026-11-29) on that fold's questions (gold passages = the passages that answer them under rule (a)) and the
other fold, the cross and the out-of-scope questions are scored; every single question is scored once, by a fit that
did not see it. Each fold's fitting time is in the output (``fit_seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import string
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.retrieval.passage import Passage  # noqa: E402

TOP_K = 5


def collapse(s: str) -> str:
    """The data's whitespace collapse."""
    return " ".join(s.split())


def word_set(s: str) -> set[str]:
    """The data's word set W(s)."""
    return {t.strip(string.punctuation).lower() for t in s.split()} - {""}


def answers(text: str, page: str, gold_pages: Sequence[str], evidence: Sequence[str], *, strict: bool) -> bool:
    """The data's rule: a gold page, and a span in the passage (a), or (unless ``strict``) half its words (b)."""
    if page not in gold_pages:
        return False
    p = collapse(text)
    words = word_set(p)
    return any(e in p or (not strict and 2 * len(word_set(e) & words) >= len(word_set(e))) for e in evidence)


@dataclass
class Question:
    """One question of the set, with its parts (one for single questions, two for cross ones, none out of scope)."""

    qid: str
    query: str
    kind: str
    domains: list[str]
    parts: list[tuple[list[str], list[str]]]  # (gold_pages, evidence) per part
    answer: str | None
    category: str | None = None

    @classmethod
    def of(cls, rec: dict) -> Question:
        parts = [(b["gold_pages"], b["evidence"]) for b in rec.get("by_domain", [])] or (
            [(rec["gold_pages"], rec["evidence"])] if rec["gold_pages"] else []
        )
        cat = rec.get("category")
        return cls(
            rec["qid"],
            rec["query"],
            rec["kind"],
            rec["domains"],
            parts,
            rec.get("answer"),
            None if cat is None else ("neighbour" if cat == "neighbour" else "offtopic"),
        )


@dataclass
class Ranked:
    """One question's ranking (passages, best first) and answer."""

    passages: list[Passage]
    mode: str | None = None
    text: str | None = None


@dataclass
class Tally:
    """Scores of one system over one group of questions."""

    n: int = 0
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **kw: float) -> None:
        for k, v in kw.items():
            self.values.setdefault(k, []).append(float(v))

    def summary(self) -> dict[str, float]:
        return {k: round(float(np.mean(v)), 3) for k, v in self.values.items()}


def load(data: Path) -> list[Question]:
    out: list[Question] = []
    for name in ("questions.jsonl", "cross.jsonl", "oos.jsonl"):
        out += [Question.of(json.loads(line)) for line in (data / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return out


def _f1(answer: str | None, reference: str | None) -> float:
    if not answer or not reference:
        return 0.0
    a = re.sub(r"\[\d+\]", "", answer)
    pa, ra = word_set(a), word_set(reference)
    common = len(pa & ra)
    return 0.0 if common == 0 else 2 * common / (len(pa) + len(ra))


_START = re.compile(r"^[\"'(\[`$#/A-Z0-9<*-]")


def on_boundaries(quote: str, passages: Sequence[Passage]) -> bool:
    """A quote (citations removed) begins where a sentence, line or paragraph of its passage begins and ends on an end
    mark or where a line or paragraph of it ends."""
    body = re.sub(r"\s*\[\d+\]", "", quote).strip()
    if not body:
        return True
    for p in passages:
        text = p.text
        head = body[:40]
        i = text.find(head)
        if i < 0:
            continue
        before = text[:i].rstrip(" ")
        starts = i == 0 or before.endswith(("\n", ".", "!", "?", ":")) or bool(_START.match(body))
        tail = body[-40:]
        j = text.find(tail, i) + len(tail)
        after = text[j:]
        ends = body.endswith((".", "!", "?", ":", ")", '"')) or after == "" or after.startswith("\n") or after.lstrip(" ").startswith("\n")
        return starts and ends
    return True  # a generated or re-worded answer is not a quote


def link_label_share(passages: Sequence[Passage], docs: Path, *, code: bool = False) -> float:
    """Share of passages whose text is mostly link labels of their page (the page's ``<a href>`` texts outside
    ``<pre>``, 3+ chars): navigation. Labels are matched in the passage's lines that are not lines of the page's
    ``<pre>`` blocks (haproxy's code examples are made of the keywords its keyword index links; code is not
    navigation), against the passage's whole length; ``code``: in code lines too (the measure before 2026-11-30)."""
    import lxml.html

    pages: dict[str, tuple[list[str], set[str]]] = {}
    mostly = 0
    for p in passages:
        if p.source not in pages:
            try:
                root = lxml.html.document_fromstring((docs / p.source).read_bytes())
                linked = (a for a in root.iter("a") if a.get("href") is not None and not any(x.tag == "pre" for x in a.iterancestors()))
                found = {collapse(a.text_content()) for a in linked}
                pre = {line for el in root.iter("pre") for raw in el.text_content().splitlines() if (line := collapse(raw))}
            except (OSError, ValueError):
                found, pre = set(), set()
            pages[p.source] = (sorted((t for t in found if len(t) >= 3), key=len, reverse=True), pre)
        labels, pre_lines = pages[p.source]
        rest = collapse(p.text if code else "\n".join(line for line in p.text.splitlines() if collapse(line) not in pre_lines))
        covered = 0
        for label in labels:
            n = rest.count(label)
            if n:
                covered += n * len(label)
                rest = rest.replace(label, " ")
        mostly += covered >= 0.5 * max(1, len(collapse(p.text)))
    return mostly / max(1, len(passages))


def bm25_ranker(passages: list[Passage]) -> Callable[[str], list[Passage]]:
    """BM25 alone over title + text of ``passages`` (bm25s, Lucene variant, English stemming and stop words)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([f"{p.title}\n{p.text}" for p in passages], stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )

    def rank(query: str) -> list[Passage]:
        ids, _ = retriever.retrieve(bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False), k=TOP_K, show_progress=False)
        return [passages[int(i)] for i in ids[0]]

    return rank


def score(questions: list[Question], ranked: dict[str, Ranked], mean_words: float) -> dict[str, dict[str, float]]:
    """Per group (single, cross, offtopic, neighbour), the scores of one system."""
    tallies: dict[str, Tally] = {}
    for q in questions:
        r = ranked.get(q.qid)
        if r is None:
            continue
        group = q.kind if q.kind != "oos" else (q.category or "oos")
        t = tallies.setdefault(group, Tally())
        refused = r.mode == "not_covered"
        if q.kind == "oos":
            t.add(not_covered=refused)
            continue
        first = r.passages[:1]
        for rule, strict in (("", False), ("_strict", True)):
            part_hit = [[answers(p.text, p.source, g, e, strict=strict) for p in r.passages[:TOP_K]] for g, e in q.parts]
            t.add(**{f"acc1{rule}": any(h[:1] and h[0] for h in part_hit), f"hit5{rule}": all(any(h) for h in part_hit)})
        t.add(page1=bool(first) and any(first[0].source in g for g, _ in q.parts), refused=refused)
        if r.mode is not None:
            t.add(answer_f1=0.0 if refused else _f1(r.text, q.answer))
    out = {g: t.summary() for g, t in sorted(tallies.items())}
    for g in out:
        out[g]["n"] = len(next(iter(tallies[g].values.values()), []))
        out[g]["mean_passage_words"] = round(mean_words, 1)
    return out


def ingest_home(docs: Path, home: Path) -> dict:
    """Ingest ``docs`` into ``home`` with the default settings; the per-product load report."""
    from indexes.ingest import ingest
    from indexes.loaders import LoadReport
    from service.artifacts import Registry
    from service.config import Settings
    from service.generation.abstention import ABSTENTION_FILE
    from training.abstention import fit_untrained

    loaded = LoadReport()
    settings = Settings(home=home)
    report = ingest([docs], settings, progress=False, loaded=loaded)
    registry = Registry(home)
    if report.version and not registry.active()["router"] and not (registry.path("index", report.version) / ABSTENTION_FILE).is_file():
        fit_untrained(settings)  # as `fedqa ingest` does on a home without a trained router
    return {
        "index": report.version,
        "seconds": round(report.seconds, 1),
        "products": {d: {k: v for k, v in r.summary().items() if k != "skipped"} for d, r in loaded.domains.items()},
    }


def serve_rankings(home: Path, questions: list[Question], *, lexical: bool = True, answer: bool = True, strategy: str = "fused") -> dict[str, Ranked]:
    """Every question through the serving path of ``home`` (``lexical`` off and ``strategy`` uis: dense alone)."""
    from service.config import Settings
    from service.loading import load_pipeline

    settings = Settings(home=home, lexical="on" if lexical else "off")
    pipeline = load_pipeline(settings, with_llm=False)
    out: dict[str, Ranked] = {}
    try:
        for q in questions:
            ret = pipeline.retrieve(q.query, top_k=TOP_K, gate_mode="deterministic", strategy=strategy)
            r = Ranked([h.passage for h in ret.hits])
            if answer:
                a = pipeline.answer_retrieval(ret)
                r.mode, r.text = a.mode.value, a.text
            out[q.qid] = r
    finally:
        pipeline.close()
    return out


def index_passages(home: Path) -> list[Passage]:
    from service.config import Settings
    from training.data.corpus import index_corpus

    return index_corpus(Settings(home=home))


def boundary_share(questions: list[Question], ranked: dict[str, Ranked]) -> float:
    quotes = [(r.text, r.passages) for q in questions if (r := ranked.get(q.qid)) and r.mode == "extractive" and r.text]
    return round(float(np.mean([on_boundaries(t, ps) for t, ps in quotes])), 3) if quotes else 0.0


def labelled_condition(home: Path, questions: list[Question], passages: list[Passage], *, fit: str = "refresh") -> dict[str, dict[str, float]]:
    """Half the single questions labelled (two folds by qid parity): ``fit`` (refresh or train router) on one, score
    the other."""
    from service.cli.main import main as fedqa
    from service.config import get_settings

    singles = [q for q in questions if q.kind == "single"]
    rest = [q for q in questions if q.kind != "single"]
    ranked: dict[str, Ranked] = {}
    seconds: dict[str, float] = {}
    for fold in (0, 1):
        train = [q for q in singles if int(q.qid.rsplit("-", 1)[1]) % 2 == fold]
        held = [q for q in singles if int(q.qid.rsplit("-", 1)[1]) % 2 != fold]
        fold_home = home.parent / f"{home.name}-fold{fold}"
        shutil.rmtree(fold_home, ignore_errors=True)
        shutil.copytree(home, fold_home)
        qfile = fold_home / "labelled.jsonl"
        with qfile.open("w", encoding="utf-8") as f:
            for q in train:
                gold = [p.doc_id for p in passages if any(answers(p.text, p.source, g, e, strict=True) for g, e in q.parts)]
                f.write(json.dumps({"qid": q.qid, "query": q.query, "domains": q.domains, "gold_doc_ids": gold, "answer": q.answer}) + "\n")
        os.environ["FEDQA_HOME"] = str(fold_home)
        get_settings.cache_clear()
        t0 = time.perf_counter()
        rc = fedqa(["refresh", "--quiet", "--queries", str(qfile)] if fit == "refresh" else ["train", "router", "--queries", str(qfile)])
        seconds[f"fold{fold}"] = round(time.perf_counter() - t0, 1)
        print(f"fold {fold}: {fit} rc={rc} in {seconds[f'fold{fold}']:.0f}s", file=sys.stderr)
        if rc:
            raise SystemExit(f"fold {fold}: {fit} failed (rc {rc})")
        scored = held + (rest if fold == 0 else [])
        got = serve_rankings(fold_home, scored)
        ranked.update(got)
    mean_words = float(np.mean([len(p.text.split()) for p in passages]))
    return {**score(questions, ranked, mean_words), "fit_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the manuals_dev folder (docs/, questions.jsonl, ...)")
    ap.add_argument("--home", type=Path, required=True, help="FEDQA_HOME to ingest into (reused when it has an index)")
    ap.add_argument("--labelled", action="store_true", help="also train on half the questions (two folds) and score the rest")
    ap.add_argument("--labelled-with", choices=["refresh", "router"], default="refresh", help="how a fold is fitted (module doc)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    questions = load(args.data)
    result: dict = {}
    result["ingest"] = ingest_home(args.data / "docs", args.home)  # nothing to do when the home holds this input already
    print(json.dumps(result["ingest"], indent=1), file=sys.stderr)
    passages = index_passages(args.home)
    mean_words = float(np.mean([len(p.text.split()) for p in passages]))
    result["passages"] = {
        "count": len(passages),
        "mean_words": round(mean_words, 1),
        "mostly_link_labels": round(link_label_share(passages, args.data / "docs"), 4),
        "mostly_link_labels_code_as_prose": round(link_label_share(passages, args.data / "docs", code=True), 4),
    }
    rank = bm25_ranker(passages)
    in_scope = [q for q in questions if q.kind != "oos"]
    systems: dict[str, dict[str, Ranked]] = {"bm25": {q.qid: Ranked(rank(q.query)) for q in in_scope}}
    systems["dense"] = serve_rankings(args.home, in_scope, lexical=False, answer=False, strategy="uis")
    systems["fedqa"] = serve_rankings(args.home, questions)
    result["no_labels"] = {name: score(questions, r, mean_words) for name, r in systems.items()}
    result["no_labels"]["fedqa"]["extractive_on_boundaries"] = {"share": boundary_share(questions, systems["fedqa"])}
    if args.labelled:
        result["half_labelled"] = labelled_condition(args.home, questions, passages, fit=args.labelled_with)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
