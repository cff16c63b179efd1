"""The house rules a reader can check by eye, checked on every source file of the project's packages:
code explains itself without tracker references (a number nobody reading the code can look up), and a
video variant of a module is not a `video_` sibling of it but lives with it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = (
    "core",
    "db",
    "lab",
    "migrations",
    "jobs",
    "api",
    "workers",
    "bench",
    "reprise",
    "clients",
    "tests",
)
SKIPPED_PARTS = frozenset({"__pycache__", ".venv", "build", "dist"})

# Spelled in two pieces so that this file does not match it: "issue" or "issues", a space, an optional
# "#", a digit.
TRACKER_REFERENCE = re.compile("[Ii]ssue" + r"s? #?[0-9]")
VIDEO_PREFIX = "video_"


def package_sources() -> Iterator[Path]:
    """Every .py file under the project's packages, outside caches, virtual environments and builds."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if SKIPPED_PARTS.isdisjoint(parts) and not any(part.endswith(".egg-info") for part in parts):
                yield path


def tracker_references(path: Path) -> list[str]:
    """The lines of a file that name a tracker issue by number, as `path:line: text`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(lines, start=1)
        if TRACKER_REFERENCE.search(line)
    ]


def image_counterpart(path: Path) -> Path | None:
    """The `<name>.py` a `video_<name>.py` would vary; None for any other file."""
    if not path.name.startswith(VIDEO_PREFIX):
        return None
    return path.with_name(path.name.removeprefix(VIDEO_PREFIX))


def video_siblings(paths: list[Path]) -> list[str]:
    """Each `video_<name>.py` that stands in the same folder as a `<name>.py`."""
    present = set(paths)
    pairs = ((path, image_counterpart(path)) for path in paths)
    return [f"{path.relative_to(ROOT)} beside {twin.name}" for path, twin in pairs if twin in present]


def test_the_pattern_finds_references_and_spares_ordinary_words() -> None:
    word = "iss" + "ue"  # never written whole before a number, so that this file passes its own test
    for reference in (f"{word} 12", f"I{word[1:]} 18", f"({word} 7)", f"{word}s 12 and 14", f"{word} #3"):
        assert TRACKER_REFERENCE.search(reference), reference
    for ordinary in (f"{word}s a working key", "restart #1 in 1.0s", f"an {word} with the lease", f"t{word}"):
        assert not TRACKER_REFERENCE.search(ordinary), ordinary


def test_the_sources_are_found() -> None:
    sources = list(package_sources())
    assert ROOT / "tests" / "test_house.py" in sources
    assert {path.relative_to(ROOT).parts[0] for path in sources} >= {"core", "api", "workers", "tests"}


def test_no_source_names_a_tracker_issue() -> None:
    """Code and tests say what they do and which paper section they follow, not which issue asked."""
    found = [line for path in package_sources() for line in tracker_references(path)]
    assert not found, "tracker references in the sources:\n" + "\n".join(found)


def test_no_video_module_stands_beside_its_image_counterpart() -> None:
    """A video variant belongs with the concept it varies (a package or the module itself), not in a
    `video_<name>.py` next to `<name>.py`."""
    pairs = video_siblings(list(package_sources()))
    assert not pairs, "video_ siblings:\n" + "\n".join(pairs)
