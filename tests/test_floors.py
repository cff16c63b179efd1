"""The floors hold: every import (module level, function level and type-only) points at the same floor
or one below it, no two modules import each other through any chain, and the API never loads the model
stack. A type-only import (`if TYPE_CHECKING:`) counts like any other: the type names its module as
surely as a call does, and a circle drawn through types is still one concept split in two.

The floors, bottom to top (the design's map of floors):
core <- (db, lab) <- (migrations, jobs) <- (api, workers) <- bench <- reprise.
Floors on one level (db and lab; migrations and jobs; api and workers) do not import each other.
The lab is a plugin besides: it registers its models and scorers (lab.registration, through
core.plugins) and no serving floor (core, db, jobs, api, workers) imports it, not even for a type;
bench and reprise, which measure and train it, may.
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
# Guides, not molds: a file is split where a concept ends, never where a line count falls. The test
# fails only far above what the tree holds, where a file or function has plainly grown two concepts.
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 90


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
    """Every import of a project module in a file, at any depth: functions and `if TYPE_CHECKING:`
    blocks included."""
    module = module_name(root, path)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in LEVEL:
                yield Import(module, target, node.lineno)


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


def package_edges(root: Path, edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto packages (a module file's package is its folder): an edge between
    two packages neither of which contains the other, so that a package may lean on its own
    subpackages and they on it, but two siblings (bench.quality, bench.run) never import each other
    through any chain."""

    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:-1]) if root.joinpath(*parts).with_suffix(".py").is_file() else module

    folded: dict[str, set[str]] = {}
    for module, targets in edges.items():
        for target in targets:
            source, into = package(module), package(target)
            if not (source == into or into.startswith(source + ".") or source.startswith(into + ".")):
                folded.setdefault(source, set()).add(into)
    return folded


def test_no_package_imports_its_sibling_back() -> None:
    _, edges = import_graph(ROOT)
    assert cycles(package_edges(ROOT, edges)) == []


TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {}\n"


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)


def test_the_checks_catch_a_planted_upward_import_and_a_cycle(tmp_path: Path) -> None:
    _plant(
        tmp_path,
        {
            "core/names.py": "def f() -> None:\n    from db import store\n",
            "db/store.py": "import core.names\n",
            "jobs/a.py": TYPE_ONLY.format("import api.routes"),
            "api/routes.py": "",
        },
    )
    imports, edges = import_graph(tmp_path)
    assert floor_violations(imports) == [
        "core.names:2 imports db (core may not import db)",
        "jobs.a:3 imports api.routes (jobs may not import api)",
    ]
    assert cycles(edges) == [["core.names", "db.store"]]


def test_the_cycle_check_catches_a_circle_drawn_through_type_only_imports(tmp_path: Path) -> None:
    # the shape bench.chaos had: the scenarios run the faults, and each fault names the scenario's
    # Run for its annotations only
    _plant(
        tmp_path,
        {
            "bench/scenarios.py": "from bench.faults import freeze\n\n\nclass Run: ...\n",
            "bench/faults/freeze.py": TYPE_ONLY.format("from bench.scenarios import Run"),
            "bench/faults/disk.py": "from bench.scenarios import Run\n",
            "bench/run.py": "class Run: ...\n",
            "bench/steady.py": TYPE_ONLY.format("from bench.run import Run"),
        },
    )
    _, edges = import_graph(tmp_path)
    assert cycles(edges) == [["bench.faults.freeze", "bench.scenarios"]]


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


SERVING = ("core", "db", "jobs", "api", "workers")


def lab_imports(root: Path) -> list[str]:
    """Imports of the lab from the serving floors, at any depth: functions and `if TYPE_CHECKING:`
    blocks included (the workers find the lab's models and scorers through core.plugins)."""
    found = []
    for floor in SERVING:
        for path in sorted((root / floor).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                if any(name.split(".")[0] == "lab" for name in names):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {', '.join(names)}")
    return sorted(found)


def test_no_serving_module_imports_the_lab(tmp_path: Path) -> None:
    assert lab_imports(ROOT) == []
    for floor in ("core", "workers", "bench"):
        (tmp_path / floor).mkdir()
    in_a_function = "def judge() -> None:\n    from lab.models import load_judge\n"
    (tmp_path / "workers" / "scoring.py").write_text(in_a_function)
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import lab.judge, numpy\n"
    (tmp_path / "core" / "types.py").write_text(type_only)
    (tmp_path / "bench" / "quality.py").write_text("import lab.judge\n")  # bench measures the lab
    assert lab_imports(tmp_path) == [
        "core/types.py:3 imports lab.judge, numpy",
        "workers/scoring.py:2 imports lab.models",
    ]


def test_the_package_check_catches_siblings_that_import_each_other(tmp_path: Path) -> None:
    # the shape bench had: quality's replay scoring read run's outcomes, and run's outcomes its drops
    _plant(
        tmp_path,
        {
            "bench/quality/replayed.py": "from bench.run.outcomes import RequestOutcome\n",
            "bench/quality/drops.py": "",
            "bench/run/outcomes.py": "from bench.quality import drops\n\n\nclass RequestOutcome: ...\n",
            "bench/live/replay.py": "from bench.quality import drops\nfrom bench.run import outcomes\n",
        },
    )
    _, edges = import_graph(tmp_path)
    assert cycles(edges) == []  # no module circle: replayed -> outcomes -> drops
    assert cycles(package_edges(tmp_path, edges)) == [["bench.quality", "bench.run"]]
