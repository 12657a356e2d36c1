"""benchmarks/bench_scale.py end to end on the shipped demo corpus: ingest, a router per fold through
'fedqa train router', /ask timings, one line per M.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from benchmarks.bench_scale import main
from tests.unit.benchmarks.test_bench_scale import KEYS


@pytest.mark.slow
def test_a_tiny_run_prints_one_line_per_m_with_the_figures(demo_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQA_SENTENCE_VECTORS_PRECOMPUTE", "0")  # a tiny index would embed every sentence at load
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main([*"--products 2 5 --max-passages 150 --max-questions 12 --router-only".split(), "--work", str(tmp_path), "--faq6", str(demo_corpus)])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["products"] for r in lines] == [2, 5]
    for r in lines:
        assert KEYS <= set(r)
        assert 0 < r["searched_fraction"] <= 1 and r["searched_mean"] == pytest.approx(r["searched_fraction"] * r["products"], abs=0.01)
        assert all(0 <= r[k] <= 1 for k in ("acc_at_1_uis", "acc_at_1_default", "acc_at_1_oracle"))
        assert r["questions"] == 12 and r["passages"] == r["indexed"] > 0
        assert 0 < r["p50_ms_uis"] <= r["p95_ms_uis"] and 0 < r["p50_ms_default"] <= r["p95_ms_default"]
        assert list(r["router_recall_at_k"].values())[-1] == 1.0  # top M: every question's product
