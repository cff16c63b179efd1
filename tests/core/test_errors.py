"""One error hierarchy: every exception class the project defines derives from core.errors.RepriseError
and lives in core/errors.py (api's Problem, the HTTP form of an error, excepted)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import core.errors
from core.errors import RepriseError

ROOT = Path(__file__).resolve().parents[2]
FLOORS = ("core", "db", "jobs", "api", "workers", "bench", "reprise", "migrations")
ALLOWED_ELSEWHERE = {("api/problems.py", "Problem")}  # derives from RepriseError too


def test_every_error_in_core_derives_from_the_one_base() -> None:
    classes = [c for _, c in inspect.getmembers(core.errors, inspect.isclass) if issubclass(c, BaseException)]
    assert len(classes) > 10
    assert all(issubclass(c, RepriseError) for c in classes)


def test_recoverable_is_a_decision_on_every_error() -> None:
    assert RepriseError.recoverable is False
    assert core.errors.SourceVanished.recoverable is True  # run as a miss
    assert core.errors.InvalidInput.recoverable is False  # the client must change the request


def test_no_exception_class_is_defined_outside_core_errors() -> None:
    elsewhere = []
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == "core/errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and (rel, node.name) not in ALLOWED_ELSEWHERE:
                    bases = {ast.unparse(base) for base in node.bases}
                    if any(b.endswith(("Error", "Exception", "Exceeded", "Timeout")) for b in bases):
                        elsewhere.append(f"{rel}: {node.name}({', '.join(sorted(bases))})")
    assert elsewhere == []
