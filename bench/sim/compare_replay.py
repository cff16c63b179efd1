"""What `reprise bench simulate --compare REPLAY.json` asks of a simulation: that it run what the
replay's stack ran (its pools follow the stack's recorded allocation, bench.live.stack), and that its
reports agree with the replay's (bench.run.compare).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.live.stack import (
    ScheduledAllocation,
    StackRecord,
    differences,
    read_comparison,
    timeline_text,
)
from bench.run.compare import Comparison, compare_reports
from bench.run.options import SimulateOptions
from bench.run.profiles import Profile
from bench.run.report import BenchReport, SweepPoint


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def replayed_schedules(
    options: SimulateOptions, profiles: Sequence[Profile], *, cohost: bool
) -> dict[str, tuple[ScheduledAllocation, ...]] | None:
    """With --compare: each profile's allocation as its replay recorded it (bench.live.stack), after
    checking that the options simulate what the stack ran. ValueError names every difference."""
    if options.compare is None:
        return None
    if options.sweep or options.rates:
        raise ValueError("--compare checks one run per profile against its replay: drop --sweep and --rates")
    measured = read_comparison(options.compare)
    schedules: dict[str, tuple[ScheduledAllocation, ...]] = {}
    problems: list[str] = []
    followed = ""
    for profile in profiles:
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        if match is None or match.get("stack") is None:
            problems.append(
                f"{options.compare} has no replay of profile {profile.name}"
                + (" with its `stack` record (replay again to record it)" if match is not None else "")
            )
            continue
        record = StackRecord.from_json(match["stack"])
        found = differences(
            record,
            profile=profile,
            large_workers=options.large_workers,
            small_workers=options.small_workers,
            monitor=options.monitor,
            cohost=cohost,
        )
        problems.extend(f"{profile.name}: {line}" for line in found)
        schedules[profile.name] = record.schedule()
        followed = f"{followed}\n  {profile.name}: {timeline_text(record.timeline)}"
    if problems:
        raise ValueError(
            "--compare: this simulation would not run what the replay ran:\n  " + "\n  ".join(problems)
        )
    _note(f"compare: the pools follow the replayed stack's:{followed}")
    return schedules


def compare_with_replay(
    rows: Sequence[BenchReport | SweepPoint], measured_path: Path, *, throughput: bool
) -> list[Comparison | None]:
    """Each row checked against its profile's replay (None where the replay has none: a failure);
    `throughput` False leaves the speedup unchecked, and the verdict says so."""
    measured = read_comparison(measured_path)
    comparisons: list[Comparison | None] = []
    for row in rows:
        report = row.report if isinstance(row, SweepPoint) else row
        match = next((m for m in measured if m.get("profile") == report.profile), None)
        if match is None:
            _note(f"compare: no measured report of profile {report.profile} in {measured_path}")
            comparisons.append(None)
            continue
        comparison = compare_reports(report, match, throughput=throughput)
        print(f"\nsimulated vs measured ({report.profile}):\n{comparison.describe()}")
        comparisons.append(comparison)
    return comparisons
