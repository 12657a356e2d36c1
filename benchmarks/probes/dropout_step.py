"""Probe: what the MiniLM's dropout, or float32 arithmetic, costs a training step of the reranker and of the retriever.

    python benchmarks/probes/dropout_step.py [--compare dropout|precision] [--rounds 3] [--steps 4] [--threads 2]

Builds each trainer's model twice from the shipped MiniLM (embeddings frozen as the trainers do): ``--compare
dropout`` (the default) with ``dropout`` on and off, both in float32; ``--compare precision`` with dropout, its steps
in float32 and in bf16 autocast (``training.precision``; fast only on a CPU with AMX tiles). It times optimisation
steps of the trainers' default shapes on faq6 texts: the reranker 48 question-passage pairs at
``RerankerConfig.max_length`` tokens (8 questions x 5 passages and 2 out-of-scope questions x 4), the retriever 16
questions against 48 passages at ``RetrieverConfig.max_seq_length`` with its symmetric InfoNCE loss.
The two settings alternate round by round, so a load that comes and goes falls on both; the first step of each
model is a warm-up and not counted. Prints the median step per model and setting, and the share of the CPU time
the hypervisor took (steal, from /proc/stat) while it ran: above a few per cent, read only the ratio.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speed_common import FAQ6, read_jsonl  # noqa: E402


def cpu_times() -> list[int] | None:
    """The machine's cumulative CPU times (user, nice, system, idle, iowait, irq, softirq, steal), or None off Linux."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed steps per model and round")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--compare", choices=["dropout", "precision"], default="dropout", help="what the two settings differ in")
    args = p.parse_args()
    import torch

    from service.retrieval.encoder import packaged_minilm_path
    from training.losses.symmetric_infonce import SymmetricInfoNCELoss, positive_mask
    from training.precision import TrainingPrecision, autocast
    from training.reranker import RerankerConfig, cross_encoder
    from training.retriever import RetrieverConfig, sentence_transformer

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(0)
    docs = read_jsonl(FAQ6 / "docs.jsonl", "text")
    questions = read_jsonl(FAQ6 / "queries_dev.jsonl", "query")
    rcfg, tcfg = RerankerConfig(), RetrieverConfig()

    def reranker_step(model, opt, precision) -> None:  # noqa: ANN001
        pairs = [(rng.choice(questions), rng.choice(docs)) for _ in range(48)]
        with autocast(precision):
            logits = model(dict(model.preprocess(pairs)))["scores"].reshape(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits))
        opt.zero_grad()
        loss.backward()
        opt.step()

    def retriever_step(model, opt, loss_fn, precision) -> None:  # noqa: ANN001
        qs, ids = [rng.choice(questions) for _ in range(16)], [str(i) for i in range(48)]
        with autocast(precision):
            columns = [model.preprocess(qs), model.preprocess([rng.choice(docs) for _ in ids])]
            loss = loss_fn(columns, positive_mask([{str(i)} for i in range(16)], ids))
        opt.zero_grad()
        loss.backward()
        opt.step()

    # the first setting of each pair is the reference: (label, dropout, precision)
    settings = {
        "dropout": [("with dropout", True, TrainingPrecision.FP32), ("without", False, TrainingPrecision.FP32)],
        "precision": [("fp32", True, TrainingPrecision.FP32), ("bf16 autocast", True, TrainingPrecision.BF16)],
    }[args.compare]
    runs = {}
    for label, dropout, precision in settings:
        ce = cross_encoder(None, rcfg.max_length, dropout=dropout)
        ce.model.get_input_embeddings().weight.requires_grad_(False)
        ce.model.train()
        opt = torch.optim.AdamW([w for w in ce.model.parameters() if w.requires_grad], lr=rcfg.lr)
        runs[("reranker", label)] = functools.partial(reranker_step, ce, opt, precision)
        st = sentence_transformer(packaged_minilm_path(), replace(tcfg, dropout=dropout))
        st[0].auto_model.get_input_embeddings().weight.requires_grad_(False)
        st.train()
        opt = torch.optim.AdamW([w for w in st.parameters() if w.requires_grad], lr=tcfg.lr)
        runs[("retriever", label)] = functools.partial(retriever_step, st, opt, SymmetricInfoNCELoss(st, temperature=tcfg.temperature), precision)
    for run in runs.values():
        run()  # warm-up
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    before = cpu_times()
    for _ in range(args.rounds):
        for key, run in runs.items():
            for _ in range(args.steps):
                t = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - t)
    after = cpu_times()
    (ref, _, _), (other, _, _) = settings
    for kind in ("reranker", "retriever"):
        a, b = statistics.median(times[(kind, ref)]), statistics.median(times[(kind, other)])
        print(f"{kind}: step {ref} {a:.2f} s, {other} {b:.2f} s (x{b / a:.2f}; {len(times[(kind, ref)])} steps each)")
    if before and after:
        spent = [b - a for a, b in zip(before, after, strict=True)]
        print(f"steal while timing: {100 * spent[7] / max(sum(spent), 1):.0f}% of the CPU time")
    print(f"torch threads: {torch.get_num_threads()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
