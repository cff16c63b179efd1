"""Print pyproject.toml's dependency list (the base one plus the named extras), one requirement a line.

The Dockerfile installs these, pinned by requirements.lock, before it copies any code: a code change then
reuses the cached dependency layers (torch and CUDA's libraries are gigabytes). A change of pyproject.toml
that leaves the dependencies alone prints the same file, so Docker reuses those layers too.

    python deploy/requirements.py pyproject.toml worker > requirements.txt
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The base dependencies and those of each extra in `extras`; an unknown extra is an error."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    unknown = set(extras) - set(optional)
    if unknown:
        raise SystemExit(f"unknown extras {sorted(unknown)}; pyproject.toml has {sorted(optional)}")
    listed = [*project["dependencies"], *(dep for extra in extras for dep in optional[extra])]
    return list(dict.fromkeys(listed))


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: requirements.py PYPROJECT [EXTRA ...]")
    print("\n".join(requirements(Path(argv[0]), argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
