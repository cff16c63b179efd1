"""The monitor's inputs from a period's statistics: measured speeds first, then what is known."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.settings import Settings, load_settings
from db.models import PoolDecision
from db.stats import CacheSummary, PeriodStats, RoleService
from jobs.pools.rebalance import period_load, step_times

START = datetime(2026, 1, 1, tzinfo=UTC)


def period(service: dict[str, RoleService]) -> PeriodStats:
    cache = CacheSummary(arrivals=120, hits=90, misses=30, k_histogram={10: 60, 30: 30})
    return PeriodStats(START, 60, cache, service, {})


@pytest.fixture
def settings() -> Settings:
    return load_settings(steps=40)


def test_measured_speeds_give_the_throughputs(settings: Settings) -> None:
    stats = period({"large": RoleService(4, 4000.0, 160), "small": RoleService(9, 1800.0, 180)})
    times = step_times(stats, settings, None)
    assert (times.large_ms, times.small_ms) == (25.0, 10.0)
    assert times.sources == {"large": "measured", "small": "measured"}
    load = period_load(stats, times, settings.steps)
    assert load is not None
    assert (load.request_rate, load.hit_rate) == (2.0, 0.75)
    assert load.k_rates == {10: 60 / 90, 30: 30 / 90}
    # 25 ms x 40 steps = 1 s a request; 10 ms x 40 = 0.4 s.
    assert (load.large_throughput, load.small_throughput) == (1.0, 2.5)


def test_a_pool_that_ran_nothing_keeps_its_last_known_speed(settings: Settings) -> None:
    previous = PoolDecision(inputs={"large_step_ms": 30.0, "small_step_ms": 12.0})
    times = step_times(period({"large": RoleService(2, 2000.0, 80)}), settings, previous)
    assert (times.large_ms, times.small_ms) == (25.0, 12.0)
    assert times.sources == {"large": "measured", "small": "carried"}


def test_then_the_configured_profile_then_the_other_model(settings: Settings) -> None:
    configured = settings.model_copy(update={"monitor_small_step_ms": 8.0})
    only_large = period({"large": RoleService(2, 2000.0, 80)})
    assert step_times(only_large, configured, None).small_ms == 8.0
    assumed = step_times(only_large, settings, None)
    assert (assumed.small_ms, assumed.sources["small"]) == (25.0, "assumed equal to large")


def test_nothing_known_means_no_load_and_the_pool_holds(settings: Settings) -> None:
    times = step_times(period({}), settings, None)
    assert (times.large_ms, times.small_ms) == (None, None)
    assert period_load(period({}), times, settings.steps) is None


def test_hits_only_the_large_pool_can_serve_are_large_pool_work(settings: Settings) -> None:
    """Resume across latent families: a hit runs its T-k steps on the large pool,
    so Algorithm 1 gives the small pool nothing and every GPU to the large model."""
    from core.vocabulary import MonitorMode
    from jobs.pools.policy import heuristic_large, hit_workload, miss_workload

    stats = period({"large": RoleService(4, 4000.0, 160), "small": RoleService(9, 1800.0, 180)})
    times = step_times(stats, settings, None)
    load = period_load(stats, times, settings.steps, hits_on_large=True)
    assert load is not None
    # 30 misses + 60 hits at k=10 (30 of 40 steps left) + 30 at k=30 (10 of 40): 82.5 full requests
    assert (load.hit_rate, load.k_rates, load.request_rate) == (0.0, {}, 82.5 / 60)
    assert (miss_workload(load), hit_workload(load)) == (82.5 / 60, 0.0)
    assert heuristic_large(load, 4, MonitorMode.THROUGHPUT) == 4
