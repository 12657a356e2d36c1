"""ruff (lint and format) and mypy (types) over the whole tree, as configured in pyproject.toml, so CI runs them;
the size rule of docs/architecture.md (modules up to 400 lines unless listed there with why, functions up to 60);
no machine's own paths in the documentation."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import ROOT

CODE = ["service", "indexes", "training"]
TREE = [*CODE, "benchmarks", "loadtests", "scripts", "tests"]  # every folder of Python
TYPED = TREE[:-1]  # mypy's files (pyproject.toml); the tests are checked in a run of their own (see below)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    r = _run("ruff", "check", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_code_is_formatted_as_ruff_format_writes_it():
    r = _run("ruff", "format", "--check", *TREE)
    assert r.returncode == 0, "run: python -m ruff format service indexes training benchmarks tests scripts loadtests\n" + r.stdout


# Two runs: the benchmarks and load tests are scripts (folders without __init__.py, run by path), so mypy names
# benchmarks/quality.py "quality" when given the folder, while a test imports it as benchmarks.quality; one run over
# both would find that file twice under two names.
@pytest.mark.slow
@pytest.mark.parametrize("files", [TYPED, ["tests"]], ids=["code", "tests"])
def test_mypy_finds_nothing(files: list[str]) -> None:
    r = _run("mypy", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


MAX_MODULE_LINES = 400  # a longer module is listed in docs/architecture.md ("Size of modules and functions") with why
MAX_FUNCTION_LINES = 60  # from the ``def`` line to the last line of the body, docstring included
SIZE_SECTION = "## Size of modules and functions"


def _listed(root: Path = ROOT) -> set[str]:
    """The modules docs/architecture.md's size section names (as `path.py`): those allowed over MAX_MODULE_LINES."""
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split(SIZE_SECTION, 1)[1].split("\n## ", 1)[0] if SIZE_SECTION in text else ""
    return set(re.findall(r"`([\w/]+\.py)`", section))


def _sizes(root: Path = ROOT, code: tuple[str, ...] | list[str] = CODE) -> tuple[list[str], list[str]]:
    """Modules over MAX_MODULE_LINES that docs/architecture.md does not list, and functions over MAX_FUNCTION_LINES,
    in ``code``."""
    modules, functions = [], []
    listed = _listed(root)
    for folder in code:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            if (n := len(text.splitlines())) > MAX_MODULE_LINES and name not in listed:
                modules.append(f"{name}: {n} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return modules, functions


def test_no_module_or_function_over_the_size_limits():
    modules, functions = _sizes()
    assert not modules, (
        f"modules over {MAX_MODULE_LINES} lines: split them by responsibility, or list them with why in docs/architecture.md "
        f"({SIZE_SECTION!r}): {modules}"
    )
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {functions}"


def test_the_size_check_finds_long_units(tmp_path):
    """The check reads what it should: a long module and a long function are reported."""
    package = tmp_path / "service"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def f():\n{body}\n" + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    (package / "short.py").write_text("def g():\n" + "\n".join(f"    y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1)) + "\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(f"# A\n\n{SIZE_SECTION}\n\nNone.\n\n## Next\n\n`service/long.py`\n")
    modules, functions = _sizes(tmp_path, ["service"])
    assert modules == [f"service/long.py: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines"]  # named outside the section
    assert functions == [f"service/long.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
    (tmp_path / "docs" / "architecture.md").write_text(f"{SIZE_SECTION}\n\n- `service/long.py`: one table of cases.\n")
    assert _sizes(tmp_path, ["service"])[0] == []  # listed with why


# A path of one machine (a checkout, a home, a scratch folder) says nothing to a reader on another.
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|root|home|tmp|Users)/")


def _machine_paths(root: Path = ROOT) -> list[str]:
    """Lines of README.md and docs/ that name a machine's own path."""
    found = []
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(root).as_posix()}:{n}: {line.strip()[:120]}")
    return found


def test_docs_name_no_machine_path():
    found = _machine_paths()
    assert not found, "docs name a path of one machine (use a home like ~/fedqa-faq6, or a path in the repository):\n" + "\n".join(found)


def test_the_path_check_finds_machine_paths(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("FEDQA_HOME=~/fedqa-acme fedqa ingest ../shared/data/faq6/docs.jsonl\n")
    (tmp_path / "docs" / "a.md").write_text("ok: https://example.org/home/x\nprobe in `/work/exp`\nsplit in /tmp/route-data\n")
    assert _machine_paths(tmp_path) == ["docs/a.md:2: probe in `/work/exp`", "docs/a.md:3: split in /tmp/route-data"]
