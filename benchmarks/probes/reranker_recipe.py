"""Probe: one reranker recipe on a built home, scored on its validation questions (PyTorch logits, no version saved).

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/reranker_recipe.py --data $FEDQA_HOME/training-data \
        --cache /tmp/cands-a.pkl [--steps 200 --max-length 128 --title --base-model DIR] [--oos ../shared/data/oos_family_dev_named.jsonl]

The candidates (the served rankings of the training, out-of-scope and validation questions) are computed once
through the serving pipeline, as ``fedqa train reranker`` computes them, and kept in ``--cache``. The cross-encoder
is then trained with the given recipe and its logits on the validation rankings give: the fitted combination
(training/reranker_fit.py: weight, depth, Acc@1 before/after, the 5-fold figure) and, with ``--oos``, the AUC of the
best combined score between the validation questions and those out-of-scope questions (what "not covered" can read).
Prints one JSON object (with ``loss_log``: the training loss and its two terms, ranking and level, averaged over
each twentieth of the steps).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import get_settings  # noqa: E402
from service.queries import load_queries  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.reranker import RerankerConfig, train_reranker  # noqa: E402
from training.reranker_data import Candidates, with_candidates  # noqa: E402
from training.reranker_fit import fit_combination  # noqa: E402
from training.reranker_version import _candidates  # noqa: E402


def _load(args: argparse.Namespace, cfg: RerankerConfig) -> dict[str, list[Candidates]]:
    cache = Path(args.cache)
    if cache.is_file():  # a .gz cache: gzip-compressed (to carry it to another machine)
        raw = cache.read_bytes()
        return pickle.loads(gzip.decompress(raw) if cache.suffix == ".gz" else raw)
    from service.loading import load_pipeline

    settings = get_settings()
    data = TrainingData.load(args.data)
    in_scope, oos, val, _ = _candidates(settings, data, cfg)
    out = {"in_scope": in_scope, "oos": oos, "val": val}
    if args.oos:
        pipeline = load_pipeline(settings, with_llm=False)
        try:
            qs = [q for f in args.oos for q in load_queries(f)]
            out["test_oos"] = with_candidates(pipeline, qs, ["out-of-scope"] * len(qs), depth=cfg.depth, passages=None, titles=cfg.titles)
        finally:
            pipeline.close()
    cache.write_bytes(pickle.dumps(out))
    return out


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    return float(np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--oos", nargs="*", default=[])
    ap.add_argument("--steps", type=int, default=RerankerConfig.steps)
    ap.add_argument("--max-length", type=int, default=RerankerConfig.max_length)
    ap.add_argument("--negatives", type=int, default=RerankerConfig.negatives)
    ap.add_argument("--lr", type=float, default=RerankerConfig.lr)
    ap.add_argument("--batch-size", type=int, default=RerankerConfig.batch_size)
    ap.add_argument("--max-questions", type=int, default=RerankerConfig.max_questions, help="330 on faq6 fold a: expert questions only")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--title", action="store_true", help="the passage's title before its text (a cache of its own)")
    ap.add_argument(
        "--base-model", default=None, help="initialise from this checkpoint (e.g. the active retriever's folder) instead of the shipped MiniLM"
    )
    ap.add_argument("--labelled-repeat", type=int, default=RerankerConfig.labelled_repeat)
    ap.add_argument("--unfreeze-embeddings", action="store_true")
    ap.add_argument("--seed", type=int, default=RerankerConfig.seed)
    ap.add_argument("--device", default="cpu", help="where to train and score (cuda: a lent GPU)")
    args = ap.parse_args()
    cfg = RerankerConfig(
        steps=args.steps,
        max_length=args.max_length,
        negatives=args.negatives,
        lr=args.lr,
        batch_size=args.batch_size,
        checkpoint_every=0,
        titles=args.title,
        max_questions=args.max_questions,
        labelled_repeat=args.labelled_repeat,
        freeze_embeddings=not args.unfreeze_embeddings,
        seed=args.seed,
    )
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cands = _load(args, cfg)
    t_train = time.perf_counter()
    history: list[dict[str, float]] = []
    model = train_reranker(
        cands["in_scope"], cands["oos"], config=cfg, base_model=args.base_model, progress=False, device=args.device, log_history=history
    )
    train_s = time.perf_counter() - t_train
    val = cands["val"]
    ces = [np.asarray(model.predict([(c.query, t) for t in c.texts], activation_fn=None, batch_size=32)).reshape(-1) for c in val]
    fit = fit_combination(val, ces, max_depth=30, seed=0)
    out = {"recipe": vars(args), "train_s": round(train_s, 1), "total_s": round(time.perf_counter() - t0, 1), "fit": fit.__dict__}
    # the training loss (and its two terms) averaged over each logging interval, by step
    out["loss_log"] = [{k: h[k] for k in ("step", "loss", "ranking", "level") if k in h} for h in history if "loss" in h]
    ce_only = float(np.mean([c.gold[int(np.argmax(ce[:20]))] for c, ce in zip(val, ces, strict=True)]))
    out["ce_alone_acc1_top20"] = ce_only
    if "test_oos" in cands:
        best = lambda c, ce: float(np.max(np.asarray(c.unified[: fit.depth]) + fit.weight * ce[: fit.depth]))  # noqa: E731
        pos = np.array([best(c, ce) for c, ce in zip(val, ces, strict=True)])
        t_ces = [np.asarray(model.predict([(c.query, t) for t in c.texts], activation_fn=None, batch_size=32)).reshape(-1) for c in cands["test_oos"]]
        neg = np.array([best(c, ce) for c, ce in zip(cands["test_oos"], t_ces, strict=True)])
        out["auc_best_combined"] = _auc(pos, neg)
        out["auc_best_ce"] = _auc(np.array([ce[:20].max() for ce in ces]), np.array([ce[:20].max() for ce in t_ces]))
        out["auc_best_unified"] = _auc(np.array([c.unified[0] for c in val]), np.array([c.unified[0] for c in cands["test_oos"]]))
    print(json.dumps(out, default=float))


if __name__ == "__main__":
    main()
