"""The repository stands alone: no source names a folder beside the checkout or an absolute path of
one machine, and every workload the benchmarks default to is in the repository (bench/data/)."""

from __future__ import annotations

import re
from pathlib import Path

from bench import ARRIVALS_DIR, DATA_DIR, PROMPTS_5K
from tests.test_house import package_sources

ROOT = Path(__file__).resolve().parents[1]

# Spelled in pieces so that this file does not match itself.
SIBLING = re.compile(r"\.\./" + "shared|" + "shared" + "/data|parents\\[[2-9]\\]\\s*/\\s*[\"']" + "shared")
MACHINE_PATH = re.compile(r"[\"'](/" + "work|/" + "home|/" + "root|/" + "Users|/" + "mnt|/opt/)[/\"']")


def outside_references(text: str) -> list[str]:
    """The lines of a source that reach outside the repository."""
    return [line.strip() for line in text.splitlines() if SIBLING.search(line) or MACHINE_PATH.search(line)]


def test_the_check_catches_a_sibling_folder_and_a_machine_path() -> None:
    planted = (
        "PROMPTS = Path('/" + "work/x/prompts.txt')\n"
        "DATA = ROOT / '..' / '" + "../sh" + "ared/data'\n"
        "ok = Path(__file__).parent / 'data'\n"
    )
    assert len(outside_references(planted)) == 2


def test_no_source_reaches_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {line}"
        for path in package_sources()
        for line in outside_references(path.read_text())
    ]
    assert found == []


def test_the_workloads_ship_with_the_repository() -> None:
    assert DATA_DIR.is_relative_to(ROOT)
    lines = PROMPTS_5K.read_text().splitlines()
    assert len(lines) == 5000 and len(set(lines)) == 4345  # 655 lines repeat an earlier prompt
    for name in ("1to8", "2to16", "4to32"):
        rows = (ARRIVALS_DIR / f"azure-shaped-{name}qps.csv").read_text().splitlines()
        ms, index = rows[0].split(",")
        assert float(ms) >= 0.0 and 0 <= int(index) < 5000
    assert "CC0" in (DATA_DIR / "README.md").read_text()
