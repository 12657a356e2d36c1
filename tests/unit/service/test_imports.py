"""The import graph of ``service/``: a request walks down the layers once (``api`` -> ``ask`` -> ``pipeline`` ->
``routing``, ``retrieval``, ``generation``), with no import back up, and no import closes a circle.

The layers are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``), checked by ``lint-imports``;
the circles are found here on the same graph (grimp's, which import-linter builds). Every import statement counts: at
module level, inside functions and under ``TYPE_CHECKING``, so a deferred import hides neither a circle nor an import
up a layer. ``from p import x`` is an edge to the module ``p.x`` where there is one, else to ``p``; the parent
packages Python runs on the way to a module are not edges (a package's ``__init__`` importing its own submodules is
no circle).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.utils import ROOT

# the lint-imports command, run by this interpreter wherever its scripts are installed
LINT_IMPORTS = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``config``, run in ``root`` (which it puts on the path), without a cache."""
    return subprocess.run([*LINT_IMPORTS, "--no-cache", "--no-logo", str(config)], cwd=root, capture_output=True, text=True, timeout=120)


def import_graph(package: str = "service") -> grimp.ImportGraph:
    """The graph of the imports among ``package``'s modules, ``TYPE_CHECKING`` ones included."""
    return grimp.build_graph(package, cache_dir=None)


def circles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """Each import that lies on a circle, with the shortest way back: ``(importer, imported, ..., importer)``."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                found.append((importer, *back))
    return found


def test_a_request_walks_down_the_layers():
    result = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, f"import-linter contracts broken (pyproject.toml's [tool.importlinter]):\n{result.stdout}{result.stderr}"
    graph = import_graph()
    # the path itself is there: each layer calls the one below
    assert graph.direct_import_exists(importer="service.api.ask", imported="service.ask")
    assert graph.direct_import_exists(importer="service.api.chat", imported="service.ask")
    assert graph.direct_import_exists(importer="service.ask", imported="service.pipeline")
    for component in ("service.routing.router", "service.retrieval.federated", "service.generation.answer"):
        assert graph.direct_import_exists(importer="service.pipeline", imported=component)


def test_service_has_no_import_circle():
    found = circles(import_graph())
    assert not found, f"imports that close a circle among service modules (break them; a deferred import does not): {found}"


def test_the_checks_find_deferred_circles_and_imports_back_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A circle closed only inside a function or under TYPE_CHECKING is found, and so is an import up a layer."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("")
    (pkg / "top.py").write_text("from toy.sub import low\n")
    (pkg / "sub" / "low.py").write_text("def f():\n    from toy import top\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("from toy import a\nB = 1\n")
    (pkg / "c.py").write_text("import toy.sub.low\n")
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "toy"\n\n[[tool.importlinter.contracts]]\nname = "toy layers"\ntype = "layers"\n'
        'containers = ["toy"]\nlayers = ["top", "sub : a : b : c"]\n'
    )
    result = lint_imports(tmp_path, config)
    assert result.returncode == 1 and "toy.sub.low -> toy.top" in result.stdout, result.stdout + result.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = import_graph("toy")
    assert circles(graph) == [
        ("toy.a", "toy.b", "toy.a"),
        ("toy.b", "toy.a", "toy.b"),
        ("toy.sub.low", "toy.top", "toy.sub.low"),
        ("toy.top", "toy.sub.low", "toy.top"),
    ]
    assert graph.find_modules_directly_imported_by("toy.c") == {"toy.sub.low"}
