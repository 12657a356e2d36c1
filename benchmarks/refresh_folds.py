"""The whole `fedqa refresh` out of sample: two folds of the labelled questions, each refreshed on one half and scored
on the other, so every question is scored once by a home whose every fitted part (retriever with ``--corpus``, router,
ranking model, answer policy, split, "not covered") never saw it.

    python benchmarks/refresh_folds.py --home BASE --work DIR --queries Q.jsonl [...] [--corpus C ...] \
        [--out-of-scope OOS.jsonl ...] [--fold 0 1] [--refresh-seed N]
    python benchmarks/quality.py --combine DIR/fold0/quality.json DIR/fold1/quality.json

``BASE`` is a home after `fedqa ingest` (copied per fold, never changed). The single-product questions are halved per
product (``training.data.split.split_queries`` at 0.5, fold 1 the complement of fold 0); a cross-product question is
scored in a fold when one of its parts is held out there (so some count in both folds; ``quality.py --combine``
averages them). Each fold: a copy of BASE, ``fedqa refresh --quiet`` on the training half with the given corpus and
out-of-scope files (timed, its log kept), then ``benchmarks/quality.py`` on the held-out half as served (no
cross-fitting: nothing was fitted on those questions). ``DIR/foldN/summary.json`` holds the refresh's seconds, its
per-stage lines and the quality summary; ``DIR/foldN/heldout.jsonl`` feeds ``benchmarks/not_covered.py --in-scope``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.queries import load_files  # noqa: E402
from training.data.split import split_queries  # noqa: E402


def raw_lines(paths: list[str]) -> dict[str, str]:
    """Each labelled question's JSON line by qid, as given (every field kept)."""
    out: dict[str, str] = {}
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out[json.loads(line)["qid"]] = line
    return out


def run_fold(fold: int, args: argparse.Namespace) -> dict:
    """Copy the base home, refresh it on the fold's training half, score the held-out half."""
    queries = load_files(args.queries, require_domains=True)
    train, held = split_queries(queries, 0.5, seed=args.seed, complement=fold == 1)
    lines = raw_lines(args.queries)
    work = Path(args.work) / f"fold{fold}"
    home = work / "home"
    if home.exists():
        shutil.rmtree(home)
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.home, home, symlinks=True)
    for name, group in (("train", train), ("heldout", held)):
        (work / f"{name}.jsonl").write_text("".join(lines[q.qid] + "\n" for q in group), encoding="utf-8")
    env = {**os.environ, "FEDQA_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "service.cli", "refresh", "--quiet", "--queries", str(work / "train.jsonl")]
    cmd += ["--corpus", *args.corpus] if args.corpus else []
    cmd += ["--out-of-scope", *args.out_of_scope] if args.out_of_scope else []
    cmd += ["--seed", str(args.refresh_seed)] if args.refresh_seed is not None else []
    print(f"fold {fold}: {len(train)} training questions, {len(held)} held out; {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(work / "refresh.log", "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.perf_counter() - t0
    print(f"fold {fold}: refresh rc={rc} in {seconds:.0f} s", file=sys.stderr, flush=True)
    summary: dict = {"fold": fold, "train": len(train), "heldout": len(held), "refresh_rc": rc, "refresh_seconds": round(seconds, 1)}
    summary["refresh_log"] = (work / "refresh.log").read_text(encoding="utf-8").splitlines()[-40:]
    if rc == 0:
        q_cmd = [sys.executable, "benchmarks/quality.py", "--queries", str(work / "heldout.jsonl"), "--strategies", args.strategies]
        q_cmd += ["--out", str(work / "quality.json")]
        with open(work / "quality.log", "w", encoding="utf-8") as log:
            summary["quality_rc"] = subprocess.run(q_cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    (work / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse, run the folds asked for, print their summaries."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", required=True, help="a home after `fedqa ingest` (copied, never changed)")
    ap.add_argument("--work", required=True, help="folder for the fold homes and their results")
    ap.add_argument("--queries", nargs="+", required=True, help="labelled questions (queries.jsonl format)")
    ap.add_argument("--corpus", nargs="+", default=[], help="passed to `fedqa refresh --corpus` (fine-tunes the retriever)")
    ap.add_argument("--out-of-scope", nargs="+", default=[], help="passed to `fedqa refresh --out-of-scope`")
    ap.add_argument("--fold", nargs="+", type=int, default=[0, 1], choices=[0, 1])
    ap.add_argument("--seed", type=int, default=0, help="seed of the halving")
    ap.add_argument("--refresh-seed", type=int, default=None, help="passed to `fedqa refresh --seed` (its training and sampling)")
    ap.add_argument("--strategies", default="fused,uis,oracle", help="quality.py's --strategies")
    args = ap.parse_args(argv)
    for fold in args.fold:
        s = run_fold(fold, args)
        print(json.dumps({k: v for k, v in s.items() if k != "refresh_log"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
