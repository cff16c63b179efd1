"""KEDA's queue-depth autoscaler in the simulator (bench.sim.autoscale): the fleet grows at once with the
jobs in the system, new workers serve after their start, and it shrinks only after the stabilization
window, retiring idle workers; the pool monitor keeps splitting whatever fleet there is."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run.costs import StepCosts
from bench.run.profiles import build_profile
from bench.sim.autoscale import Autoscaler, AutoscalerSpec, fleet_summary
from bench.sim.config import SimConfig
from bench.sim.monitor import AllocationPoint
from bench.sim.pools import Pools, PoolTargets
from bench.sim.simulate import run_simulation
from bench.workload.trace import ArrivalKind, ArrivalSpec, Prompts, build_workload
from core.settings import Settings
from core.vocabulary import Role


def test_the_fleet_grows_at_once_and_shrinks_to_the_windows_largest_wish() -> None:
    scaler = Autoscaler(AutoscalerSpec(min_workers=2, max_workers=10, stabilization_s=300))
    assert scaler.decide(0.0, jobs=0, fleet=2) == 2  # never under min
    assert scaler.decide(15.0, jobs=7, fleet=2) == 7  # one job a worker, at once
    assert scaler.decide(30.0, jobs=40, fleet=7) == 10  # never over max
    assert scaler.decide(45.0, jobs=1, fleet=10) == 10  # the window still wants 10
    assert scaler.decide(400.0, jobs=3, fleet=10) == 3  # 300 s later only small wishes are left
    with pytest.raises(ValueError, match="MIN:MAX"):
        AutoscalerSpec.parse("4")
    assert AutoscalerSpec.parse("2:16") == AutoscalerSpec(min_workers=2, max_workers=16)


def test_a_resized_pool_starts_new_workers_late_and_retires_only_idle_ones() -> None:
    pools = Pools(PoolTargets(large=1, small=1))
    pools.resize(4, 10.0, start_s=60.0, grow=Role.LARGE)
    assert (pools.fleet, pools.targets) == (4, PoolTargets(large=3, small=1))
    joined = pools.workers[2:]
    assert all(not worker.has_slot(69.0) and worker.has_slot(70.0) for worker in joined)
    pools.workers[0].jobs[1] = 100.0  # busy: it stays
    pools.resize(1, 100.0, start_s=60.0, grow=Role.LARGE)
    assert pools.fleet == 1 and not pools.workers[0].retired  # only the busy large worker is left
    pools.resize(2, 200.0, start_s=60.0, grow=Role.SMALL)  # a retired worker comes back first
    assert pools.fleet == 2 and len(pools.workers) == 4


def test_fleet_summary_weighs_each_size_by_its_time() -> None:
    timeline = [AllocationPoint(0.0, 1, 1), AllocationPoint(100.0, 3, 1)]
    mean, low, high = fleet_summary(timeline, 300.0)
    assert mean == pytest.approx((2 * 100 + 4 * 200) / 300) and (low, high) == (2, 4)


def test_a_burst_grows_the_fleet_and_the_quiet_after_it_shrinks_it(
    repeat_prompts: Prompts, bench_settings: Settings, tmp_path: Path
) -> None:
    # 40 requests in the first 4 s, then one every 60 s for 10 minutes.
    rows = [(i * 100, i % 30) for i in range(40)] + [(4000 + i * 60000, i % 30) for i in range(10)]
    arrivals = tmp_path / "burst.csv"
    arrivals.write_text("arrival_ms,prompt_idx\n" + "".join(f"{t},{i}\n" for t, i in rows))
    workload = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.FILE, path=arrivals))
    spec = AutoscalerSpec(min_workers=1, max_workers=12, start_s=30.0, stabilization_s=120.0)
    config = SimConfig(
        profile=build_profile("vanilla", bench_settings),
        costs=StepCosts(large_step_ms=100.0, decode_ms=0.0),  # 5 s a generation
        cache_bytes=0,
        large_workers=1,
        small_workers=0,
        autoscaler=spec,
    )
    result = run_simulation(workload, config, settings=bench_settings, embeddings=None)
    assert all(outcome.succeeded for outcome in result.outcomes) and len(result.outcomes) == 50
    timeline = result.allocation_timeline
    assert timeline is not None
    fleets = [point.large + point.small for point in timeline]
    assert max(fleets) == 12 and fleets[-1] < 12  # grew to the cap, then shrank in the quiet
    grown = next(point.t for point in timeline if point.large + point.small == 12)
    shrunk = next(point.t for point in timeline if point.t > grown and point.large + point.small < 12)
    assert shrunk - grown >= spec.stabilization_s - spec.polling_s


def test_workers_that_batch_are_asked_for_one_per_batch_of_jobs(
    repeat_prompts: Prompts, bench_settings: Settings, tmp_path: Path
) -> None:
    # The ScaledObjects' target is a pod's batch of jobs: 40 jobs at once need 5 workers of 8, not 12.
    rows = [(i * 100, i % 30) for i in range(40)]
    arrivals = tmp_path / "burst.csv"
    arrivals.write_text("arrival_ms,prompt_idx\n" + "".join(f"{t},{i}\n" for t, i in rows))
    workload = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.FILE, path=arrivals))
    config = SimConfig(
        profile=build_profile("vanilla", bench_settings),
        costs=StepCosts(large_step_ms=100.0, decode_ms=0.0, batch_slowdown=((1, 1.0), (8, 2.0))),
        cache_bytes=0,
        large_workers=1,
        small_workers=0,
        max_batch=8,
        autoscaler=AutoscalerSpec(min_workers=1, max_workers=12, start_s=30.0, stabilization_s=120.0),
    )
    result = run_simulation(workload, config, settings=bench_settings, embeddings=None)
    assert all(outcome.succeeded for outcome in result.outcomes) and len(result.outcomes) == 40
    timeline = result.allocation_timeline
    assert timeline is not None
    # At the first poll some of the 40 have ended: at most ceil(40 / 8) workers of 8 jobs each.
    assert 2 <= max(point.large + point.small for point in timeline) <= 5
