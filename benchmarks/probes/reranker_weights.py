"""Probe: the active reranker of $FEDQA_HOME on its validation questions, weight by weight, with both runtimes.

    FEDQA_HOME=~/fedqa-faq6-a python benchmarks/probes/reranker_weights.py --data $FEDQA_HOME/training-data

The validation questions' served rankings (the default strategy with the active router, not reranked, top 30) are
scored by the reranker's ONNX int8 export and by PyTorch: Acc@1 of U alone, of the cross-encoder alone over the
top 20, and of ``U + w * ce`` for every weight of training/reranker_fit.py's grid at depths 5, 10 and 20, with the
range of the logits. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.artifacts import Registry  # noqa: E402
from service.config import get_settings  # noqa: E402
from service.loading import load_pipeline  # noqa: E402
from service.reranking.model import RerankBackend, Reranker  # noqa: E402
from training.data.dataset import TrainingData  # noqa: E402
from training.reranker_data import with_candidates  # noqa: E402
from training.reranker_fit import WEIGHTS, top1_correct  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the training set whose validation questions are scored")
    args = ap.parse_args()
    settings = get_settings()
    registry = Registry(settings.home_dir)
    version = registry.active().get("reranker")
    if not version:
        raise SystemExit(f"no active reranker in {settings.home_dir}")
    path = registry.path("reranker", version)
    titles = Reranker.load(path, version, backend=RerankBackend.TORCH).params.titles
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        qs = [q for q in TrainingData.load(args.data).val if q.gold_doc_ids and not q.is_cross]
        val = with_candidates(pipeline, qs, ["labelled"] * len(qs), depth=30, passages=None, titles=titles)
    finally:
        pipeline.close()
    out: dict = {"reranker": version, "questions": len(val), "u_alone": float(np.mean([c.gold[0] for c in val if c.gold]))}
    for backend in (RerankBackend.ONNX, RerankBackend.TORCH):
        reranker = Reranker.load(path, version, backend=backend)
        t0 = time.perf_counter()
        ces = [reranker.logits(c.query, c.texts) for c in val]
        flat = np.concatenate(ces)
        out[reranker.backend.value] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "ce_alone_top20": float(np.mean([c.gold[int(np.argmax(ce[:20]))] for c, ce in zip(val, ces, strict=True)])),
            "logits": [float(flat.min()), float(flat.max())],
            "acc1": {str(d): {str(w): round(float(top1_correct(val, ces, w, d).mean()), 3) for w in WEIGHTS} for d in (5, 10, 20)},
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
