"""ruff (lint) and mypy (types) over the code, as configured in pyproject.toml, so CI runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ["service", "indexes", "training"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    r = _run("ruff", "check", *CODE)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_mypy_finds_nothing():
    r = _run("mypy", *CODE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
