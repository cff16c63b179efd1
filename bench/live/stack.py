"""What the stack ran with during a replay, and the check that a simulation runs with the same.

The replay polls /v1/stats while it runs (`StackWatch`) and writes what it saw into its JSON as
`stack` (`StackRecord.as_json`):

    monitor     the pool monitor's configuration: {enabled, mode, period_s} (null when the stack does
                not report it)
    profile     the profile the replay asked for, described (bench.run.profiles.Profile.describe)
    steps       T sent with every request (null: the server's default)
    timeline    [{t, submitted, large, small, mode}, ...]: the workers per GPU pool from second t of the
                replay, when `submitted` requests had been sent, and the mode of the monitor's newest
                decision taken since the replay started (null before its first); a point per change

Under DiffServe's allocator the watch also follows the cascade (/v1/stats `cascade`): the report's
`threshold_timeline` (`StackWatch.thresholds`) is the threshold in force when the replay started, then
one point per decision the allocator took during it: {t, submitted, threshold, light, heavy, escalated
(f at the threshold), feasible, solve_ms, fallback, cold_start}, as the simulator's (bench.sim.cascade)
with `submitted`, and whether the stated fallback or a cold start decided.

`reprise bench simulate --compare replay.json` reads it back: `differences` lists every option of the
simulation that is not what the stack ran (the profile, T, the pools at the start, the monitor mode),
and the simulation refuses to run while any is left. It then follows the stack's allocation
(`schedule`) instead of running a monitor of its own: the monitor decides on wall-clock periods, and
the simulator's clock is not the stack's (it gives each worker a device of its own), so its decisions
would fall at other points of the trace. A point is placed by requests submitted, not by seconds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.live.records import parse_time
from bench.run.profiles import Profile
from core.vocabulary import MonitorMode

MONITOR_OFF = "off"
STATS_POLL_S = 2.0  # a decision comes at most once a minute (Settings.monitor_period_s >= 60)


@dataclass(frozen=True, slots=True)
class StackPoint:
    """The GPU pools from second `t` of the replay, after `submitted` requests were sent."""

    t: float
    submitted: int
    large: int
    small: int
    mode: str | None = None  # the mode of the monitor's newest decision in the replay; None: none yet

    def as_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 3),
            "submitted": self.submitted,
            "large": self.large,
            "small": self.small,
            "mode": self.mode,
        }


@dataclass(frozen=True, slots=True)
class ScheduledAllocation:
    """From the arrival of request number `after_requests` (0-based) on, these many workers per pool."""

    after_requests: int
    large: int
    small: int


@dataclass(frozen=True, slots=True)
class StackRecord:
    monitor: Mapping[str, Any] | None
    profile: Mapping[str, Any]
    steps: int | None
    timeline: tuple[StackPoint, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "monitor": dict(self.monitor) if self.monitor is not None else None,
            "profile": dict(self.profile),
            "steps": self.steps,
            "timeline": [point.as_json() for point in self.timeline],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StackRecord:
        points = tuple(
            StackPoint(float(p["t"]), int(p["submitted"]), int(p["large"]), int(p["small"]), p.get("mode"))
            for p in data.get("timeline") or ()
        )
        if not points:
            raise ValueError("the replay's `stack` record has no timeline: replay again to record one")
        return cls(data.get("monitor"), data.get("profile") or {}, data.get("steps"), points)

    def monitor_mode(self) -> str | None:
        """'off', 'quality' or 'throughput' as the stack ran it; None when it cannot be told (a stack
        that does not report its configuration, and whose monitor decided nothing during the replay)."""
        if self.monitor is not None:
            return str(self.monitor["mode"]) if self.monitor.get("enabled") else MONITOR_OFF
        modes = {point.mode for point in self.timeline if point.mode is not None}
        return modes.pop() if len(modes) == 1 else None

    @property
    def start(self) -> StackPoint:
        """The pools the stack started the replay with: its first reading with a GPU worker. Readings
        before any (a replay begun as soon as the API answered, the workers still registering) are the
        stack starting: what was submitted by then waited for those first pools."""
        return next((point for point in self.timeline if point.large + point.small > 0), self.timeline[0])

    def schedule(self) -> tuple[ScheduledAllocation, ...]:
        """The changes of allocation after the start, placed by requests submitted. A reading with
        another number of GPU workers than the start's (a worker restarting) is left out: the
        simulator moves workers between pools, it does not add or remove them."""
        changes: list[ScheduledAllocation] = []
        start = self.start
        current = (start.large, start.small)
        for point in self.timeline[self.timeline.index(start) + 1 :]:
            if point.large + point.small != start.large + start.small:
                continue
            if (point.large, point.small) != current:
                current = (point.large, point.small)
                changes.append(ScheduledAllocation(point.submitted, point.large, point.small))
        return tuple(changes)


def differences(
    record: StackRecord,
    *,
    profile: Profile,
    large_workers: int,
    small_workers: int,
    monitor: MonitorMode | None,
    cohost: bool | None = None,
) -> list[str]:
    """Every way a simulation with these options would not run what the replayed stack ran, as a line
    that names the option to change; empty when none. `cohost`: whether the simulation's small workers
    also host the large model (Settings.cohosting), checked where the stack reported its own."""
    lines: list[str] = []
    ran_cohost = (record.monitor or {}).get("cohost")
    if cohost is not None and ran_cohost is not None and bool(ran_cohost) != cohost:
        fix = "true" if ran_cohost else "false"
        lines.append(
            f"REPRISE_COHOST: the stack's small workers {'also' if ran_cohost else 'did not'} host the large "
            f"model, this simulation's {'do' if cohost else 'do not'} (set REPRISE_COHOST={fix})"
        )
    described = profile.describe()
    for name, ran in record.profile.items():
        if described.get(name) != ran:
            lines.append(
                f"profile {name}: the replay ran {ran!r}, this simulation {described.get(name)!r} "
                "(simulate with the settings the replay ran with)"
            )
    if record.steps is not None and record.steps != profile.steps:
        lines.append(
            f"steps: the replay sent T = {record.steps}, this simulation runs T = {profile.steps} "
            f"(set REPRISE_STEPS={record.steps})"
        )
    start = record.start
    for option, ran, asked in (
        ("--large-workers", start.large, large_workers),
        ("--small-workers", start.small, small_workers),
    ):
        if ran != asked:
            lines.append(
                f"{option}: the stack started the replay with {ran}, this simulation with {asked} "
                f"(pass {option} {ran})"
            )
    ran_mode, asked_mode = record.monitor_mode(), monitor.value if monitor is not None else MONITOR_OFF
    if ran_mode is not None and ran_mode != asked_mode:
        lines.append(
            f"--monitor: the stack's pool monitor was {ran_mode}, this simulation's is {asked_mode} "
            f"(pass --monitor {ran_mode})"
        )
    return lines


def read_comparison(path: Path) -> list[dict[str, Any]]:
    """The measured reports of a replay JSON (one object, or a list)."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def write_replay_json(path: Path, report: Mapping[str, Any], stack: StackRecord | None) -> None:
    """A replay's report (bench.run.report's contract fields) with its `stack` record (None: not read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({**report, **({"stack": stack.as_json()} if stack is not None else {})}, indent=2)
    path.write_text(text + "\n", encoding="utf-8")


@dataclass
class StackWatch:
    """Polls /v1/stats during a replay and keeps a point whenever the pools or the decision mode change.
    `submitted` is read from the replay as it runs."""

    started_at: datetime  # the replay's start on the server's clock scale (UTC): older decisions are not its
    monitor: Mapping[str, Any] | None = None
    lookup: Mapping[str, Any] | None = None  # the stack's own lookup configuration (/v1/stats "lookup")
    points: list[StackPoint] = field(default_factory=list)
    thresholds: list[dict[str, float]] = field(default_factory=list)  # DiffServe's: see the module docstring
    _decided: datetime | None = None  # the newest cascade decision seen

    def observe(self, stats: Mapping[str, Any], *, t: float, submitted: int) -> None:
        self._observe_pools(stats, t=t, submitted=submitted)
        if stats.get("cascade") is not None:
            self._observe_cascade(stats["cascade"], stats.get("pools") or {}, t=t, submitted=submitted)

    def _observe_cascade(
        self, cascade: Mapping[str, Any], pools: Mapping[str, Any], *, t: float, submitted: int
    ) -> None:
        """The threshold in force at the first reading, then each decision taken since the replay started."""
        decision = cascade.get("decision") or {}
        decided = parse_time(decision.get("decided_at"))
        fresh = decided is not None and decided >= self.started_at and decided != self._decided
        if self.thresholds and not fresh:
            return
        self._decided = decided
        point: dict[str, float] = {"t": round(t, 3), "submitted": submitted}
        if not fresh:  # the first reading, before any decision of the replay: what the light workers apply
            point |= {
                "threshold": float(cascade["threshold"]),
                "light": int(pools.get("small", 0)),
                "heavy": int(pools.get("large", 0)),
            }
            self.thresholds.append(point)
            return
        solution, target = decision.get("solution") or {}, decision.get("target") or {}
        point |= {
            "threshold": float(decision["threshold"]),
            "light": int(target.get("light", 0)),
            "heavy": int(target.get("heavy", 0)),
            "feasible": bool(decision.get("feasible")),
            "solve_ms": round(float(decision.get("solve_ms") or 0.0), 3),
            "fallback": solution.get("fallback") is not None,
            "cold_start": solution.get("cold_start") is not None,
        }
        if solution.get("escalated") is not None:
            point["escalated"] = round(float(solution["escalated"]), 4)  # f at the threshold
        self.thresholds.append(point)

    def _observe_pools(self, stats: Mapping[str, Any], *, t: float, submitted: int) -> None:
        pools = stats.get("pools") or {}
        decision = stats.get("pool_monitor") or {}
        decided = parse_time(decision.get("decided_at"))
        mode = decision.get("mode") if decided is not None and decided >= self.started_at else None
        if mode is None and self.points:
            mode = self.points[-1].mode
        if stats.get("monitor") is not None:
            self.monitor = stats["monitor"]
        if stats.get("lookup") is not None:
            self.lookup = stats["lookup"]
        point = StackPoint(t, submitted, int(pools.get("large", 0)), int(pools.get("small", 0)), mode)
        last = self.points[-1] if self.points else None
        if last is None or (last.large, last.small, last.mode) != (point.large, point.small, point.mode):
            self.points.append(point)

    async def poll(self, client: httpx.AsyncClient, *, t: float, submitted: int) -> None:
        """One reading; a failed one is skipped (the next poll comes in STATS_POLL_S)."""
        try:
            response = await client.get("/v1/stats")
            if response.status_code == 200:
                self.observe(response.json(), t=t, submitted=submitted)
        except (httpx.HTTPError, ValueError):
            return

    def embedder(self, configured: Mapping[str, Any]) -> dict[str, Any]:
        """The embedder the stack looked prompts up with (/v1/stats' lookup.embedder, a table's
        profiled_with tag) in place of `configured`, this process's, where the two differ: the
        replay's settings need not be the stack's (a lab stack embeds in lab:attributes where a replay
        process left at the defaults names MiniLM). `configured` where the stack did not say."""
        reported = self.lookup or {}
        tag = reported.get("embedder")
        if tag is None:
            return dict(configured)
        if str(tag).split(":")[0] == configured.get("name"):
            return dict(configured) | {"tag": tag}
        lookup = "text-to-text" if reported.get("lookup") == "text" else "text-to-image"
        return {"name": tag, "lookup": lookup, "source": "the stack's /v1/stats (lookup.embedder)"}

    def record(self, profile: Profile, steps: int | None) -> StackRecord:
        """What ran: the profile as this process reads it, with the lookup the stack reported in its
        place (the stack's REPRISE_* settings need not be this process's)."""
        described = profile.describe()
        if self.lookup is not None:
            described |= {
                key: self.lookup[key] for key in ("lookup", "hit_policy", "k_table") if key in self.lookup
            }
        return StackRecord(self.monitor, described, steps, tuple(self.points))

    async def run(
        self,
        client: httpx.AsyncClient,
        stop: asyncio.Event,
        *,
        clock: Callable[[], float],
        submitted: Callable[[], int],
    ) -> None:
        """Poll every STATS_POLL_S until `stop` is set, then once more; `clock()` and `submitted()`
        read the replay."""
        while not stop.is_set():
            await self.poll(client, t=clock(), submitted=submitted())
            try:
                await asyncio.wait_for(stop.wait(), timeout=STATS_POLL_S)
            except TimeoutError:
                continue
        await self.poll(client, t=clock(), submitted=submitted())


def timeline_text(points: Sequence[StackPoint]) -> str:
    """'1L+1S from request 0, 2L+0S from request 61 (throughput)' for messages."""
    return ", ".join(
        f"{p.large}L+{p.small}S from request {p.submitted}" + (f" ({p.mode})" if p.mode else "")
        for p in points
    )
