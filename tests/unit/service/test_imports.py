"""The import graph of ``service/``: no circle, and a request walks down the layers once
(``api`` -> ``ask`` -> ``pipeline`` -> ``routing``, ``retrieval``, ``generation``), with no import back up.

Every import statement counts: at module level, inside functions and under ``TYPE_CHECKING`` (read with ``ast``, so
a deferred import cannot hide a circle). ``from p import x`` is an edge to the module ``p.x`` where there is one,
else to ``p``. The parent packages Python runs on the way to a module are not edges (a package's ``__init__``
importing its own submodules is no circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.utils import ROOT

# The request path, top to bottom; a module imports nothing of a layer above its own. A module of no layer
# (config, schemas, text, artifacts, ...) is a shared value or helper and counts as the bottom layer.
LAYERS: list[tuple[str, ...]] = [
    ("service.api", "service.cli"),
    ("service.evaluation", "service.loading"),
    ("service.ask",),
    ("service.pipeline",),
]


def modules(root: Path, package: str = "service") -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root / package`` (a package is its ``__init__.py``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` names, or the nearest package above it that is one of ``known``."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT, package: str = "service") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports anywhere in its text."""
    known = modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_resolve(a.name, known) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else _resolve(base, known) for a in node.names]
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str, layers: list[tuple[str, ...]]) -> int:
    """0 for the top layer; len(layers) for a module of none (the bottom)."""
    for depth, prefixes in enumerate(layers):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return depth
    return len(layers)


def upward(graph: dict[str, set[str]], layers: list[tuple[str, ...]] = LAYERS) -> list[str]:
    """Imports from a module to one of a layer above its own."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if _layer(t, layers) < _layer(m, layers))


def test_service_has_no_import_circle():
    found = circles(import_graph())
    assert not found, f"import circles among service modules (break them; a deferred import does not): {found}"


def test_a_request_walks_down_the_layers():
    assert not upward(import_graph()), "imports back up the request path (api -> ask -> pipeline -> components)"
    graph = import_graph()
    # the path itself is there: each layer calls the one below
    assert "service.ask" in graph["service.api.ask"] and "service.ask" in graph["service.api.chat"]
    assert "service.pipeline" in graph["service.ask"]
    assert {"service.routing.router", "service.retrieval.federated", "service.generation.answer"} <= graph["service.pipeline"]


def test_the_check_finds_deferred_circles_and_imports_back_up(tmp_path):
    """A circle closed only inside a function or under TYPE_CHECKING is found, and so is an import up a layer."""
    pkg = tmp_path / "service"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("")
    (pkg / "top.py").write_text("from service.sub import low\n")
    (pkg / "sub" / "low.py").write_text("def f():\n    from service import top\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("from service import a\nB = 1\n")
    (pkg / "c.py").write_text("import service.sub.low\n")
    graph = import_graph(tmp_path)
    assert circles(graph) == [["service.a", "service.b"], ["service.sub.low", "service.top"]]
    assert upward(graph, [("service.top",)]) == ["service.sub.low -> service.top"]
    assert graph["service.c"] == {"service.sub.low"}
