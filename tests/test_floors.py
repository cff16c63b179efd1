"""The floors hold: every import (module level and function level) points at the same floor or one
below it, no two modules import each other through any chain, and the API never loads the model stack.

The floors, bottom to top (the design's map of floors):
core <- (db, lab) <- (migrations, jobs) <- (api, workers) <- bench <- reprise.
Floors on one level (db and lab; migrations and jobs; api and workers) do not import each other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LEVEL = {
    "core": 0,
    "db": 1,
    "lab": 1,
    "migrations": 2,
    "jobs": 2,
    "api": 3,
    "workers": 3,
    "bench": 4,
    "reprise": 5,
}
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported project module, dotted
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_sources(root: Path) -> Iterator[Path]:
    for floor in LEVEL:
        yield from sorted((root / floor).rglob("*.py"))


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    """Every import of a project module in a file, at any depth (functions included), but not those
    under `if TYPE_CHECKING:` (they never run)."""
    module = module_name(root, path)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in LEVEL:
                yield Import(module, target, node.lineno)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def floor_violations(imports: Iterable[Import]) -> list[str]:
    """Imports that point up a floor or sideways to another floor of the same level."""
    bad: dict[tuple[str, int], str] = {}  # one message per import statement
    for imp in imports:
        source, target = imp.module.split(".")[0], imp.target.split(".")[0]
        if source != target and LEVEL[target] >= LEVEL[source]:
            message = f"{imp.module}:{imp.line} imports {imp.target} ({source} may not import {target})"
            bad.setdefault((imp.module, imp.line), message)
    return sorted(bad.values())


def resolve(target: str, modules: set[str]) -> str | None:
    """The project module an import names (`from a.b import c` may name module a.b.c or a name in a.b)."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def import_graph(root: Path) -> tuple[list[Import], dict[str, set[str]]]:
    files = list(project_sources(root))
    modules = {module_name(root, path) for path in files}
    imports = [imp for path in files for imp in imports_of(root, path)]
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for imp in imports:
        target = resolve(imp.target, modules)
        if target is not None and target != imp.module and not imp.module.startswith(target + "."):
            # a package's __init__ is not a dependency of its own submodules' imports of siblings
            edges[imp.module].add(target)
    return imports, edges


def test_every_import_points_down_a_floor() -> None:
    imports, _ = import_graph(ROOT)
    assert floor_violations(imports) == []


def test_no_import_cycles() -> None:
    _, edges = import_graph(ROOT)
    assert cycles(edges) == []


def test_the_checks_catch_a_planted_upward_import_and_a_cycle(tmp_path: Path) -> None:
    for floor in ("core", "db", "jobs"):
        (tmp_path / floor).mkdir()
        (tmp_path / floor / "__init__.py").write_text("")
    (tmp_path / "core" / "names.py").write_text("def f() -> None:\n    from db import store\n")
    (tmp_path / "db" / "store.py").write_text("import core.names\n")
    planted = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import api\n"
    (tmp_path / "jobs" / "a.py").write_text(planted)
    imports, edges = import_graph(tmp_path)
    assert floor_violations(imports) == ["core.names:2 imports db (core may not import db)"]
    assert cycles(edges) == [["core.names", "db.store"]]


def test_a_floor_does_not_import_its_neighbour_on_the_same_level() -> None:
    planted = [Import("api.routes", "workers.tasks", 3), Import("jobs.x", "migrations.env", 1)]
    assert len(floor_violations(planted)) == 2


def test_the_api_never_loads_the_model_stack() -> None:
    probe = (
        "import sys, api.main\n"
        "heavy = ('torch', 'diffusers', 'open_clip', 'transformers', 'sklearn', 'workers', 'lab')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _long_functions(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {length} lines"


@pytest.mark.parametrize("folder", [*LEVEL, "tests"])
def test_files_and_functions_stay_small(folder: str) -> None:
    too_long = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "versions" in path.parts:
            continue  # migrations are written once and read as a whole
        lines = path.read_text().count("\n")
        if lines > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)} has {lines} lines")
        too_long.extend(_long_functions(path))
    assert too_long == []
