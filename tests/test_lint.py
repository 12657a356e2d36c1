"""ruff (lint and format) and mypy (types) over the code, as configured in pyproject.toml, so CI runs them; and the size
rule of docs/architecture.md (modules up to 350 lines, functions up to 60)."""

from __future__ import annotations

import ast
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


def test_code_is_formatted_as_ruff_format_writes_it():
    r = _run("ruff", "format", "--check", *CODE, "benchmarks", "tests", "scripts", "loadtests")
    assert r.returncode == 0, "run: python -m ruff format service indexes training benchmarks tests scripts loadtests\n" + r.stdout


@pytest.mark.slow
def test_mypy_finds_nothing():
    r = _run("mypy", *CODE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60  # from the ``def`` line to the last line of the body, docstring included
# Modules allowed over the limits (a sentence in docs/architecture.md must say why): none; keep it empty.
SIZE_EXCEPTIONS: set[str] = set()


def _sizes(root: Path = ROOT, code: tuple[str, ...] | list[str] = CODE) -> tuple[list[str], list[str]]:
    """Modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES in ``code``, outside SIZE_EXCEPTIONS."""
    modules, functions = [], []
    for folder in code:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in SIZE_EXCEPTIONS:
                continue
            text = path.read_text(encoding="utf-8")
            if (n := len(text.splitlines())) > MAX_MODULE_LINES:
                modules.append(f"{name}: {n} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return modules, functions


def test_no_module_or_function_over_the_size_limits():
    modules, functions = _sizes()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines (split them where a name says what each part holds): {modules}"
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {functions}"


def test_the_size_check_finds_long_units(tmp_path):
    """The check reads what it should: a long module and a long function are reported."""
    package = tmp_path / "service"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def f():\n{body}\n" + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    (package / "short.py").write_text("def g():\n" + "\n".join(f"    y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1)) + "\n")
    modules, functions = _sizes(tmp_path, ["service"])
    assert modules == [f"service/long.py: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines"]
    assert functions == [f"service/long.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
