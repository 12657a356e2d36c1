"""Probe: where the README's refresh flow spends its time, step by step and function by function.

    FEDQA_HOME=~/fedqa-faq6 python benchmarks/probes/flow_profile.py --out /tmp/flow -- \
        --corpus ../shared/data/faq6/docs.jsonl --queries ../shared/data/faq6/queries_dev.jsonl \
        ../shared/data/faq6/cross_dev.jsonl --out-of-scope ../shared/data/oos_dev.jsonl --val-fraction 0.5
    python benchmarks/probes/flow_profile.py --aggregate /tmp/flow/train-reranker.txt   # one step's table again

Runs the flow's commands in ``$FEDQA_HOME`` (which must hold an ingested corpus) as the README writes them: ``fedqa
data build ARGS --out $FEDQA_HOME/training-data --force``, ``train retriever``, ``index build``, ``train reranker``
and ``train router`` (``--router-args``, default ``--synthetic-per-domain 800`` as docs/quality.md's folds), each
timed, and prints the seconds per step and in all. With ``--py-spy`` (``pip install py-spy``; not a dependency of
fedqa) each step runs under ``py-spy record --nonblocking`` at ``--rate`` samples a second, its collapsed stacks are
kept in ``--out``, and the project's functions are listed by inclusive share of the step's samples (a function
counted once per stack). The sampler costs a few per cent of one core: time a flow without it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROJECT = ("service/", "training/", "indexes/", "benchmarks/")
FRAME = re.compile(r"(.*) \((.*?):\d+\)$")


def inclusive(raw: Path) -> tuple[int, Counter[str]]:
    """Total samples of a py-spy raw (collapsed) file and each project function's inclusive samples."""
    total, counts = 0, Counter[str]()
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        seen = set()
        for frame in stack.split(";"):
            m = FRAME.match(frame.strip())
            if m and m.group(2).startswith(PROJECT) and (key := f"{m.group(1)} ({m.group(2)})") not in seen:
                seen.add(key)
                counts[key] += int(n)
    return total, counts


def print_profile(raw: Path, top: int) -> None:
    """The ``top`` project functions of one step by inclusive share."""
    total, counts = inclusive(raw)
    print(f"  {raw.name}: {total} samples")
    for key, n in counts.most_common(top):
        print(f"  {100 * n / max(total, 1):6.1f}%  {key}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the per-step output (and stacks with --py-spy)")
    p.add_argument("--py-spy", action="store_true", help="sample each step with py-spy")
    p.add_argument("--rate", type=int, default=50, help="py-spy samples a second")
    p.add_argument("--top", type=int, default=25, help="functions listed per step")
    p.add_argument("--router-args", default="--synthetic-per-domain 800")
    p.add_argument("--aggregate", type=Path, help="only print the table of an earlier step's stacks")
    p.add_argument("build_args", nargs=argparse.REMAINDER, help="after --: the arguments of 'fedqa data build'")
    args = p.parse_args(argv)
    if args.aggregate:
        print_profile(args.aggregate, args.top)
        return 0
    if not args.out:
        p.error("--out is required to run the flow")
    if args.py_spy and not shutil.which("py-spy"):
        p.error("py-spy is not on PATH (pip install py-spy)")
    home = Path(os.environ.get("FEDQA_HOME", "~/.fedqa")).expanduser()
    data = str(home / "training-data")
    build = [a for a in args.build_args if a != "--"]
    steps = {
        "data-build": ["data", "build", *build, "--out", data, "--force"],
        "train-retriever": ["train", "retriever", "--data", data],
        "index-build": ["index", "build"],
        "train-reranker": ["train", "reranker", "--data", data],
        "train-router": ["train", "router", "--data", data, *args.router_args.split()],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    beside = Path(sys.executable).with_name("fedqa")  # the fedqa of this interpreter's environment
    fedqa = [str(beside) if beside.is_file() else "fedqa"]
    t_all = time.perf_counter()
    for name, cmd in steps.items():
        raw = args.out / f"{name}.txt"
        full = (
            ["py-spy", "record", "--nonblocking", "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--", *fedqa, *cmd]
            if args.py_spy
            else [*fedqa, *cmd]
        )
        t0 = time.perf_counter()
        with open(args.out / f"{name}.log", "w", encoding="utf-8") as log:
            subprocess.run(full, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
        if args.py_spy and raw.is_file():
            print_profile(raw, args.top)
    print(f"flow: {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
