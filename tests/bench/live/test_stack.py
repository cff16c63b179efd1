"""What a replay records of the stack (pools and pool monitor over time, from /v1/stats), and
`simulate --compare` running that configuration or refusing, naming the difference."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.live.stack import ScheduledAllocation, StackRecord, StackWatch, differences
from bench.run.options import SimulateOptions, WorkloadOptions
from bench.run.profiles import build_profile
from bench.sim.runner import simulate_main
from core.settings import Settings
from core.vocabulary import HitPolicy, MonitorMode

START = datetime(2030, 1, 1, tzinfo=UTC)
MONITOR = {"enabled": True, "mode": "throughput", "period_s": 60}


def stats(large: int, small: int, decided_at: str | None = None, mode: str = "throughput") -> dict[str, Any]:
    decision = {"decided_at": decided_at, "mode": mode} if decided_at else None
    return {
        "pools": {"large": large, "small": small, "decode": 1},
        "pool_monitor": decision,
        "monitor": MONITOR,
    }


def test_the_watch_keeps_a_point_per_change_and_ignores_decisions_older_than_the_replay(
    bench_settings: Settings,
) -> None:
    watch = StackWatch(started_at=START)
    watch.observe(stats(1, 1, decided_at="2029-12-31T23:00:00Z"), t=0.0, submitted=0)  # an earlier run's
    watch.observe(stats(1, 1, decided_at="2029-12-31T23:00:00Z"), t=2.0, submitted=8)
    watch.observe(stats(2, 0, decided_at="2030-01-01T00:01:00Z"), t=61.0, submitted=120)
    watch.observe(stats(2, 0, decided_at="2030-01-01T00:01:00Z"), t=63.0, submitted=126)
    record = watch.record(build_profile("configured", bench_settings), steps=None)
    assert [(p.submitted, p.large, p.small, p.mode) for p in record.timeline] == [
        (0, 1, 1, None),
        (120, 2, 0, "throughput"),
    ]
    assert record.monitor_mode() == "throughput"
    assert record.schedule() == (ScheduledAllocation(120, 2, 0),)
    assert StackRecord.from_json(json.loads(json.dumps(record.as_json()))) == record


def test_the_record_names_the_lookup_the_stack_reported_not_this_processs(bench_settings: Settings) -> None:
    """A stack started with its own REPRISE_* settings reports its lookup in /v1/stats; the record keeps
    that, so a simulation's --compare checks against what ran."""
    profile = build_profile("configured", bench_settings)
    other = next(policy for policy in HitPolicy if policy is not profile.hit_policy).value
    watch = StackWatch(started_at=START)
    ran = {"lookup": "image", "hit_policy": other, "k_table": "0.7:25", "embedder": "lab:attributes"}
    watch.observe({**stats(1, 1), "lookup": ran}, t=0.0, submitted=0)
    described = watch.record(profile, steps=None).profile
    assert (described["lookup"], described["hit_policy"], described["k_table"]) == ("image", other, "0.7:25")
    plain = StackWatch(started_at=START)
    plain.observe(stats(1, 1), t=0.0, submitted=0)  # a stack that does not report it: this process's
    assert plain.record(profile, steps=None).profile == profile.describe()


def _reporting(lookup: dict[str, str] | None) -> StackWatch:
    """A watch that has read one /v1/stats, with `lookup` as its lookup block (None: none)."""
    watch = StackWatch(started_at=START)
    watch.observe({**stats(1, 1), **({"lookup": lookup} if lookup else {})}, t=0.0, submitted=0)
    return watch


def test_the_report_names_the_embedder_the_stack_looked_up_with() -> None:
    configured = {
        "name": "minilm",
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "lookup": "text-to-text",
    }
    lab = _reporting({"lookup": "image", "embedder": "lab:attributes"})
    assert lab.embedder(configured) == {
        "name": "lab:attributes",
        "lookup": "text-to-image",
        "source": "the stack's /v1/stats (lookup.embedder)",
    }
    same = _reporting({"lookup": "text", "embedder": "minilm:all-MiniLM-L6-v2"})
    assert same.embedder(configured) == configured | {"tag": "minilm:all-MiniLM-L6-v2"}
    assert _reporting(None).embedder(configured) == configured


def test_a_stack_that_does_not_report_its_monitor_is_read_from_its_decisions(
    bench_settings: Settings,
) -> None:
    watch = StackWatch(started_at=START)
    for t, (large, small) in enumerate([(1, 1), (2, 0)]):
        payload = stats(large, small, decided_at="2030-01-01T00:01:00Z" if t else None, mode="quality")
        payload.pop("monitor")
        watch.observe(payload, t=float(t), submitted=t * 50)
    record = watch.record(build_profile("configured", bench_settings), steps=None)
    assert record.monitor is None and record.monitor_mode() == "quality"
    quiet = StackRecord(None, {}, None, record.timeline[:1])
    assert quiet.monitor_mode() is None  # no decision seen: the mode cannot be told


def cascade_stats(threshold_now: float, decision: dict[str, Any] | None) -> dict[str, Any]:
    return {**stats(1, 1), "cascade": {"threshold": threshold_now, "decision": decision}}


def cascade_decision(decided_at: str, threshold: float, **solution: Any) -> dict[str, Any]:
    return {
        "decided_at": decided_at,
        "threshold": threshold,
        "feasible": solution.pop("feasible", True),
        "solve_ms": 4.2,
        "target": {"light": 1, "heavy": 1},
        "solution": {"fallback": None, **solution},
    }


def test_the_watch_keeps_the_cascade_threshold_in_force_then_each_decision_of_the_replay() -> None:
    """The threshold the light workers apply at the start (an earlier run's decision), then a point per
    decision taken during the replay, read once however often it is polled."""
    watch = StackWatch(started_at=START)
    before = cascade_decision("2029-12-31T23:00:00Z", 1.0, escalated=1.0)
    cold = cascade_decision("2030-01-01T00:01:00Z", 0.5, cold_start="no model's speed is known yet")
    fallback = cascade_decision(
        "2030-01-01T00:02:00Z", 0.0, escalated=0.0, feasible=False, fallback="infeasible: ..."
    )
    for t, submitted, payload in (
        (0.0, 0, cascade_stats(1.0, before)),
        (2.0, 4, cascade_stats(1.0, before)),
        (61.0, 20, cascade_stats(0.5, cold)),
        (63.0, 24, cascade_stats(0.5, cold)),
        (121.0, 44, cascade_stats(0.0, fallback)),
    ):
        watch.observe(payload, t=t, submitted=submitted)
    assert watch.thresholds == [
        {"t": 0.0, "submitted": 0, "threshold": 1.0, "light": 1, "heavy": 1},
        {
            "t": 61.0,
            "submitted": 20,
            "threshold": 0.5,
            "light": 1,
            "heavy": 1,
            "feasible": True,
            "solve_ms": 4.2,
            "fallback": False,
            "cold_start": True,
        },
        {
            "t": 121.0,
            "submitted": 44,
            "threshold": 0.0,
            "light": 1,
            "heavy": 1,
            "feasible": False,
            "solve_ms": 4.2,
            "fallback": True,
            "cold_start": False,
            "escalated": 0.0,
        },
    ]
    plain = StackWatch(started_at=START)
    plain.observe(stats(1, 1), t=0.0, submitted=0)
    assert plain.thresholds == []  # no cascade in /v1/stats: the report's timeline stays null


def test_the_watch_polls_stats_while_the_replay_runs() -> None:
    readings = iter([stats(1, 1), stats(2, 0, decided_at="2030-01-01T00:01:00Z")])
    last = stats(2, 0, decided_at="2030-01-01T00:01:00Z")

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/stats"
        return httpx.Response(200, json=next(readings, last))

    async def replay() -> StackWatch:
        watch = StackWatch(started_at=START)
        stop = asyncio.Event()
        async with httpx.AsyncClient(
            base_url="http://stack", transport=httpx.MockTransport(answer)
        ) as client:
            task = asyncio.create_task(watch.run(client, stop, clock=lambda: 1.0, submitted=lambda: 7))
            await asyncio.sleep(0)
            stop.set()
            await task
        return watch

    watch = asyncio.run(replay())
    assert [(p.large, p.small, p.mode) for p in watch.points] == [(1, 1, None), (2, 0, "throughput")]
    assert watch.monitor == MONITOR


def test_differences_name_every_option_to_change(bench_settings: Settings) -> None:
    profile = build_profile("configured", bench_settings)
    other = next(policy for policy in HitPolicy if policy is not profile.hit_policy).value
    ran = StackRecord(
        MONITOR,
        {**profile.describe(), "hit_policy": other},
        profile.steps + 1,
        (StackRecord.from_json({"timeline": [{"t": 0, "submitted": 0, "large": 1, "small": 1}]}).timeline),
    )
    lines = differences(ran, profile=profile, large_workers=3, small_workers=1, monitor=None)
    assert len(lines) == 4
    assert f"profile hit_policy: the replay ran {other!r}" in lines[0]
    assert lines[1].startswith("steps:") and f"REPRISE_STEPS={profile.steps + 1}" in lines[1]
    assert lines[2].startswith("--large-workers: the stack started the replay with 1, this simulation with 3")
    assert lines[3].startswith("--monitor: the stack's pool monitor was throughput") and "off" in lines[3]
    same = StackRecord(MONITOR, profile.describe(), None, ran.timeline)
    assert (
        differences(same, profile=profile, large_workers=1, small_workers=1, monitor=MonitorMode.THROUGHPUT)
        == []
    )


def test_a_replay_begun_before_the_workers_registered_starts_from_their_first_pools(
    bench_settings: Settings,
) -> None:
    """Readings with no GPU worker yet (the replay began as the API answered) are the stack starting: a
    simulation compares with, and follows, the pools it had from its first worker on."""
    profile = build_profile("configured", bench_settings)
    points = [(0, 0, 0), (4, 1, 1), (46, 1, 1), (88, 2, 0)]
    timeline = [{"t": n, "submitted": n, "large": large, "small": small} for n, large, small in points]
    points_read = StackRecord.from_json({"timeline": timeline}).timeline
    ran = StackRecord(MONITOR, profile.describe(), None, points_read)
    assert (ran.start.large, ran.start.small, ran.start.submitted) == (1, 1, 4)
    assert ran.schedule() == (ScheduledAllocation(88, 2, 0),)
    same = differences(ran, profile=profile, large_workers=1, small_workers=1, monitor=MonitorMode.THROUGHPUT)
    assert same == []
    idle = StackRecord(MONITOR, profile.describe(), None, ran.timeline[:1])
    assert idle.start is idle.timeline[0]  # never a worker: the reading it has


def _replay_json(
    path: Path, profile: dict[str, Any], timeline: list[dict[str, Any]], monitor: dict[str, Any] = MONITOR
) -> Path:
    measured = {
        "profile": profile["name"],
        "requests": 60,
        "hit_rate": 0.5,
        "compute_saved": 0.3,
        "k_histogram": {"25": 30},
        "stack": {"monitor": monitor, "profile": profile, "steps": None, "timeline": timeline},
    }
    path.write_text(json.dumps(measured), encoding="utf-8")
    return path


def test_simulate_compare_refuses_another_configuration(
    repeat_trace: Path, bench_settings: Settings, tmp_path: Path
) -> None:
    profile = build_profile("modm", bench_settings).describe()
    replay = _replay_json(
        tmp_path / "replay.json", profile, [{"t": 0, "submitted": 0, "large": 1, "small": 1}]
    )
    options = SimulateOptions(
        workload=WorkloadOptions(trace=repeat_trace), profiles=("modm",), compare=replay, progress=False
    )  # the defaults: 3 large + 1 small, no monitor
    with pytest.raises(ValueError, match="--large-workers") as refused:
        simulate_main(bench_settings, options)
    assert "--monitor: the stack's pool monitor was throughput" in str(refused.value)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"profile": "modm", "requests": 60}), encoding="utf-8")
    with pytest.raises(ValueError, match="replay again"):
        simulate_main(bench_settings, replace(options, compare=old))


def test_simulate_compare_follows_the_replayed_allocation(
    repeat_trace: Path, bench_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = build_profile("modm", bench_settings).describe()
    timeline: list[dict[str, Any]] = [
        {"t": 0, "submitted": 0, "large": 1, "small": 1, "mode": None},
        {"t": 61, "submitted": 40, "large": 2, "small": 0, "mode": "throughput"},
    ]
    replay = _replay_json(tmp_path / "replay.json", profile, timeline)
    out = tmp_path / "sim.json"
    simulate_main(bench_settings, replace(_as_replayed(repeat_trace, replay), json_path=out))
    simulated = json.loads(out.read_text())
    assert [(p["large"], p["small"]) for p in simulated["allocation_timeline"]] == [(1, 1), (2, 0)]
    assert "simulated vs measured (modm)" in capsys.readouterr().out


def test_simulate_compare_refuses_another_co_hosting(
    repeat_trace: Path, bench_settings: Settings, tmp_path: Path
) -> None:
    """A replay of a stack whose small workers co-hosted the large model is not simulated without it."""
    profile = build_profile("modm", bench_settings).describe()
    start = [{"t": 0, "submitted": 0, "large": 1, "small": 1}]
    monitor = {**MONITOR, "cohost": not bench_settings.cohosting}
    replay = _replay_json(tmp_path / "replay.json", profile, start, monitor)
    with pytest.raises(ValueError, match="REPRISE_COHOST") as refused:
        simulate_main(bench_settings, _as_replayed(repeat_trace, replay))
    assert f"set REPRISE_COHOST={str(not bench_settings.cohosting).lower()}" in str(refused.value)
    assert "--large-workers" not in str(refused.value)  # the one difference


def _as_replayed(trace: Path, replay: Path) -> SimulateOptions:
    """A simulation of modm with the pools and monitor the replays above recorded (1 large, 1 small)."""
    return SimulateOptions(
        workload=WorkloadOptions(trace=trace),
        profiles=("modm",),
        large_workers=1,
        small_workers=1,
        monitor=MonitorMode.THROUGHPUT,
        compare=replay,
        progress=False,
    )
