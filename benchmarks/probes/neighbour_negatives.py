"""Probe: do some neighbouring products' questions, as out-of-scope training questions, make the others "not covered"?

    cp -a ~/fedqa-faq6-b /tmp/home-b
    FEDQA_HOME=/tmp/home-b python benchmarks/probes/neighbour_negatives.py --family ../shared/data/oos_family_dev.jsonl \
        --named ../shared/data/oos_family_dev_named.jsonl --train-products mksh tortoisehg expect nano --out /tmp/nn-b -- \
        --corpus ../shared/data/faq6/docs.jsonl --queries ../shared/data/faq6/queries_dev.jsonl \
        ../shared/data/faq6/cross_dev.jsonl --out-of-scope ../shared/data/oos_dev.jsonl --val-fraction 0.5 --val-complement

Changes ``$FEDQA_HOME`` (give it a copy of a home after the README's refresh flow). ``fedqa data build`` runs again
with the arguments after ``--`` and, added to its ``--out-of-scope`` files, the ``--family`` questions of the
``--train-products``. The in-scope validation questions must come out as before, so the home's retriever and index
stay untouched by them. Then ``fedqa train reranker`` (which trains on every out-of-scope question with each candidate
as a negative) and ``fedqa train router --synthetic-per-domain 800`` run, and ``benchmarks/not_covered.py`` (leave one
product out, targets 0.02 and 0.03). Only the products not trained on are printed: nothing in the home saw their
questions. Steps' output and the JSON go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from service.jsonl import read_objects  # noqa: E402


def in_scope_qids(path: Path) -> list[str]:
    """The qids of a training set's in-scope validation questions (those with domains)."""
    return sorted(r["qid"] for _, r in read_objects(path) if r.get("domains"))


def run(cmd: list[str], log: Path) -> None:
    """Run ``cmd`` from the repository root, its output to ``log``; print its seconds."""
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    print(f"{log.stem}: {time.perf_counter() - t0:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", type=Path, required=True, help="neighbouring products' questions ('product' field)")
    p.add_argument("--named", type=Path, required=True, help="those that name their product (for not_covered.py)")
    p.add_argument("--train-products", nargs="+", required=True, help="products whose questions train")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("build_args", nargs=argparse.REMAINDER, help="after --: the home's 'fedqa data build' arguments")
    args = p.parse_args(argv)
    build = [a for a in args.build_args if a != "--"]
    if "--out-of-scope" not in build:
        p.error("the data build arguments need --out-of-scope (the home's own out-of-scope files)")
    home = Path(os.environ.get("FEDQA_HOME", "~/.fedqa")).expanduser()
    data = home / "training-data"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [r for _, r in read_objects(args.family)]
    train = args.out / "train-products.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows if r["product"] in args.train_products), encoding="utf-8")
    held_out = sorted({str(r["product"]) for r in rows} - set(args.train_products))
    before = in_scope_qids(data / "val.jsonl")
    at = build.index("--out-of-scope") + 1
    fedqa = str(Path(sys.executable).with_name("fedqa"))
    run([fedqa, "data", "build", *build[:at], str(train), *build[at:], "--out", str(data), "--force"], args.out / "data-build.log")
    if in_scope_qids(data / "val.jsonl") != before:
        raise SystemExit("the rebuilt training set holds out other in-scope questions: its retriever and index do not fit")
    run([fedqa, "train", "reranker", "--data", str(data)], args.out / "train-reranker.log")
    run([fedqa, "train", "router", "--data", str(data), "--synthetic-per-domain", "800"], args.out / "train-router.log")
    own = next((i for i, a in enumerate(build[at:], at) if a.startswith("--")), len(build))
    oos = [*build[at:own], str(args.family)]
    report = args.out / "not_covered.json"
    nc = [sys.executable, "benchmarks/not_covered.py", "--in-scope", str(data / "val.jsonl"), "--oos", *oos]
    run([*nc, "--named", str(args.named), "--false-refusal", "0.02", "0.03", "--out", str(report)], args.out / "not-covered.log")
    for r in json.loads(report.read_text(encoding="utf-8"))["rows"]:
        if r["product"] in held_out and r["setting"] == "leave one product out":
            print(f"{r['product']:12s} target {r['target']}: named refused {r['not_covered_named']}, in-scope refused {r['in_scope_refused']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
