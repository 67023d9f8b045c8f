"""service/fenceline has no import cycle. Every import counts, also one inside a function or
under ``if TYPE_CHECKING:``: a cycle hidden that way is still two modules that cannot be
understood (or moved) apart."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "service" / "fenceline"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports. ``from a.b import c`` is an edge to
    ``a.b.c`` when that is a module, else to ``a.b``."""
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    top = root.name
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module's package
                    base = mod.split(".")
                    base = base if is_package else base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{a.name}" if f"{source}.{a.name}" in files else source
                    for a in node.names
                ]
            for t in targets:
                if (t == top or t.startswith(top + ".")) and t in files and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
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


def write_tree(root: Path, files: Iterable[tuple[str, str]]) -> Path:
    for rel, text in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_service_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 50  # the walk found the package
    assert "fenceline.runtime.service" in graph["fenceline.api.interop"]
    assert cycles(graph) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = write_tree(tmp_path, [
        ("pkg/__init__.py", ""),
        ("pkg/a.py", "from pkg.b import thing\n"),
        ("pkg/b.py", "def thing():\n    from pkg import a\n    return a\n"),
        ("pkg/c.py", "import pkg.a\n"),
    ])
    assert cycles(import_graph(root / "pkg")) == [["pkg.a", "pkg.b"]]


def test_a_cycle_under_type_checking_or_relative_is_found(tmp_path: Path) -> None:
    root = write_tree(tmp_path, [
        ("pkg/__init__.py", ""),
        ("pkg/sub/__init__.py", ""),
        ("pkg/sub/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from pkg.y import Y\n"),
        ("pkg/y.py", "from .sub import x\n"),
    ])
    assert cycles(import_graph(root / "pkg")) == [["pkg.sub.x", "pkg.y"]]


def test_a_tree_without_cycles_passes(tmp_path: Path) -> None:
    root = write_tree(tmp_path, [
        ("pkg/__init__.py", "from pkg.a import f\n"),
        ("pkg/a.py", "from pkg.b import g\n"),
        ("pkg/b.py", "import os\n"),
    ])
    assert cycles(import_graph(root / "pkg")) == []
