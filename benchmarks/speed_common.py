"""Helpers of the speed benchmarks: percentiles, the machine and its load, faq6 questions, a served home."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "loadtests"))
from common import rss_bytes, serve  # noqa: E402,F401 - re-exported for the benchmark scripts

FAQ6 = REPO.parent / "shared" / "data" / "faq6"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def machine() -> dict:
    """CPU model, cores and the load average now (the figures depend on both)."""
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    return {"cpu": model, "cores": os.cpu_count(), "load_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def read_jsonl(path: str | Path, key: str | None = None) -> list:
    """Records of a JSONL file (or only their ``key`` field)."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r[key] for r in rows] if key else rows


def emit(figure: dict) -> None:
    """Print one figure as a JSON line, with the machine and its load."""
    print(json.dumps({**figure, "machine": machine()}), flush=True)
