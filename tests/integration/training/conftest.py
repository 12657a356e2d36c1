"""Fixtures of the training tests: a demo home with a small reranker trained on its rankings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.files import copytree_sparse
from tests.conftest import built_once, make_settings


@pytest.fixture(scope="package")
def reranker_home(demo_home, tmp_path_factory):
    """A copy of the demo home with a small reranker trained on its rankings (a few steps: the mechanics, not the
    quality); trained once per run (:func:`tests.conftest.built_once`), under pytest-xdist copied by each worker."""
    from service.demo import DOCS, OUT_OF_SCOPE, QUERIES
    from service.jsonl import read_objects
    from service.queries import load_queries
    from service.retrieval.passage import Passage
    from training.data.build import DataConfig, build_training_data
    from training.data.dataset import TrainingData
    from training.data.synthetic import HeuristicQueryGenerator
    from training.reranker import RerankerConfig
    from training.reranker_version import train_and_save

    def build(home: Path) -> None:
        copytree_sparse(demo_home, home, dirs_exist_ok=True)
        corpus = [Passage.from_payload(rec) for _, rec in read_objects(DOCS)]
        out = home / "data"
        build_training_data(
            corpus,
            load_queries(QUERIES),
            out,
            generators=[HeuristicQueryGenerator()],
            config=DataConfig(val_fraction=0.3),
            progress=False,
            out_of_scope=load_queries(OUT_OF_SCOPE),
        )
        cfg = RerankerConfig(steps=6, batch_size=4, max_questions=40, depth=10, checkpoint_every=0)
        version, metrics = train_and_save(make_settings(home), TrainingData.load(out), config=cfg, progress=False)
        (home / "reranker-fixture.json").write_text(json.dumps({"version": version, "metrics": metrics}), encoding="utf-8")

    home = built_once(tmp_path_factory, "rerank-home", build, copied=True)
    trained = json.loads((home / "reranker-fixture.json").read_text(encoding="utf-8"))
    return make_settings(home), trained["version"], trained["metrics"]
