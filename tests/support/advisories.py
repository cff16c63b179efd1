"""The offline dependency audit: the pinned versions of requirements.lock against a vendored snapshot of
the PyPA advisory database (OSV format), so that `make test` audits the dependencies without a network.

tests/data/advisories/ holds the snapshot (pypa-osv.json, every advisory of every locked package, with the
commit and date it was taken from), the waivers (waivers.toml: an advisory id and why it does not apply)
and their provenance. Rebuild the snapshot from a checkout of github.com/pypa/advisory-database:

    .venv/bin/python -m tests.support.advisories PATH/TO/advisory-database [COMMIT DATE]

The snapshot is only as new as its commit; `pip-audit -r requirements.lock` asks the live database
(docs/development.md).
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
ADVISORIES_DIR = ROOT / "tests" / "data" / "advisories"
SNAPSHOT = ADVISORIES_DIR / "pypa-osv.json"
WAIVERS = ADVISORIES_DIR / "waivers.toml"


def locked_versions(text: str) -> dict[str, str]:
    """`name==version` lines of a lock file, by canonical name (comments, markers and hashes dropped)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        spec = line.split("#", 1)[0].split(";", 1)[0].split("\\", 1)[0].strip()
        name, sep, version = spec.partition("==")
        if sep and name:
            pins[canonicalize_name(name.split("[", 1)[0])] = version.strip()
    return pins


@dataclass(frozen=True, slots=True)
class Advisory:
    """One advisory about one package: its ECOSYSTEM ranges (OSV events) and listed versions."""

    id: str
    package: str
    aliases: tuple[str, ...]
    summary: str
    ranges: tuple[tuple[dict[str, str], ...], ...]
    versions: tuple[str, ...]

    def affects(self, version: str) -> bool:
        """Whether `version` is listed, or lies in a range (introduced <= v < fixed, or <= last_affected)."""
        if version in self.versions:
            return True
        try:
            pinned = Version(version)
        except InvalidVersion:
            return False
        return any(_in_range(pinned, events) for events in self.ranges)

    def fixed_in(self) -> list[str]:
        return [event["fixed"] for events in self.ranges for event in events if "fixed" in event]


def _in_range(version: Version, events: Iterable[dict[str, str]]) -> bool:
    # OSV: the events, sorted by version, switch "affected" on (introduced) and off (fixed, last_affected).
    affected = False
    for event in sorted(events, key=lambda e: _event_version(next(iter(e.values())))):
        kind, bound = next(iter(event.items()))
        at = _event_version(bound)
        if version > at or (version == at and kind != "last_affected"):  # this event is behind us
            affected = kind == "introduced"
    return affected


def _event_version(text: str) -> Version:
    return Version("0") if text == "0" else Version(text)


def advisory_from_osv(record: dict[str, Any], package: str) -> Advisory | None:
    """The advisory an OSV record gives about `package`; None when it says nothing of it or is withdrawn."""
    if record.get("withdrawn"):
        return None
    ranges: list[tuple[dict[str, str], ...]] = []
    versions: list[str] = []
    for affected in record.get("affected", []):
        if canonicalize_name(affected.get("package", {}).get("name", "")) != package:
            continue
        for found in affected.get("ranges", []):
            if found.get("type") == "ECOSYSTEM":
                ranges.append(tuple({str(k): str(v) for k, v in e.items()} for e in found.get("events", [])))
        versions.extend(str(v) for v in affected.get("versions", []))
    if not ranges and not versions:
        return None
    summary = record.get("summary") or (record.get("details") or "").strip().split("\n", 1)[0]
    return Advisory(
        id=record["id"],
        package=package,
        aliases=tuple(record.get("aliases") or ()),
        summary=summary[:300],
        ranges=tuple(ranges),
        versions=tuple(versions) if not ranges else (),  # a range says it all; a bare list is kept
    )


def load_snapshot(path: Path = SNAPSHOT) -> tuple[dict[str, Any], list[Advisory]]:
    """The snapshot's source (repository, commit, date) and its advisories."""
    data = json.loads(path.read_text())
    advisories = [
        Advisory(
            id=item["id"],
            package=item["package"],
            aliases=tuple(item["aliases"]),
            summary=item["summary"],
            ranges=tuple(tuple(events) for events in item["ranges"]),
            versions=tuple(item["versions"]),
        )
        for item in data["advisories"]
    ]
    return data["source"], advisories


def load_waivers(path: Path = WAIVERS) -> dict[str, str]:
    """Advisory id -> why it does not apply to us."""
    table = tomllib.loads(path.read_text())
    return {item["id"]: item["reason"] for item in table.get("waiver", [])}


@dataclass(frozen=True, slots=True)
class Finding:
    advisory: Advisory
    version: str

    def __str__(self) -> str:
        fixed = ", ".join(self.advisory.fixed_in()) or "no fixed version"
        return (
            f"{self.advisory.package}=={self.version}: {self.advisory.id} "
            f"({', '.join(self.advisory.aliases)}; fixed in {fixed}): {self.advisory.summary}"
        )


def findings(pins: dict[str, str], advisories: Iterable[Advisory]) -> list[Finding]:
    """Every advisory that affects a pinned version."""
    return [
        Finding(advisory, pins[advisory.package])
        for advisory in advisories
        if advisory.package in pins and advisory.affects(pins[advisory.package])
    ]


def _osv_records(database: Path, packages: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    import yaml

    wanted = set(packages)
    for folder in sorted((database / "vulns").iterdir()):
        package = canonicalize_name(folder.name)
        if folder.is_dir() and package in wanted:
            for path in sorted(folder.glob("*.yaml")):
                yield package, yaml.safe_load(path.read_text())


def build_snapshot(database: Path, pins: dict[str, str], *, commit: str, date: str) -> dict[str, Any]:
    """Every advisory of every locked package (not only those affecting the pinned version, so that a
    downgrade is caught too), from a checkout of the PyPA advisory database."""
    advisories = [
        found
        for package, record in _osv_records(database, pins)
        if (found := advisory_from_osv(record, package)) is not None
    ]
    return {
        "source": {
            "repository": "https://github.com/pypa/advisory-database",
            "commit": commit,
            "date": date,
            "license": "CC-BY-4.0",
        },
        "advisories": [
            {
                "id": a.id,
                "package": a.package,
                "aliases": list(a.aliases),
                "summary": a.summary,
                "ranges": [list(events) for events in a.ranges],
                "versions": list(a.versions),
            }
            for a in sorted(advisories, key=lambda a: (a.package, a.id))
        ],
    }


def main(argv: list[str]) -> None:
    database = Path(argv[0])
    commit = argv[1] if len(argv) > 1 else "unknown"
    date = argv[2] if len(argv) > 2 else "unknown"
    snapshot = build_snapshot(database, locked_versions(LOCK.read_text()), commit=commit, date=date)
    SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    print(f"{len(snapshot['advisories'])} advisories written to {SNAPSHOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
