"""The monitor's period, chained once: pinned workers first, then the allocation, then the fewest moves,
then the record; with a recording stand-in for the service's (or the simulator's) pools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from core.settings import load_settings
from core.vocabulary import MonitorMode, Role
from jobs.pools.loop import Measurement, MonitorConfig, PeriodDecision, Switch, run_period
from jobs.pools.policy import LargeBounds, PidState, PoolLoad, RoleLimits

# W_miss = 8, W_hit = 18 (tests/jobs/pools/test_policy.py); with 4 workers Eqs. 11-12 give
# 8 / (9 + 8) x 4 = 1.88 large workers.
LOAD = PoolLoad(
    request_rate=32.0, hit_rate=0.75, k_rates={10: 1.0}, steps=40, large_throughput=2.0, small_throughput=4.0
)
THROUGHPUT = MonitorConfig(mode=MonitorMode.THROUGHPUT)


@dataclass
class FakePools:
    """Measures what it is given, accepts moves unless told to refuse, keeps what it records."""

    measurement: Measurement | None
    refuse: set[str] = field(default_factory=set)
    asked: list[tuple[str, Role]] = field(default_factory=list)
    recorded: list[PeriodDecision] = field(default_factory=list)

    def measure(self) -> Measurement | None:
        return self.measurement

    def actuate(self, worker: str, role: Role) -> bool:
        self.asked.append((worker, role))
        return worker not in self.refuse

    def record(self, decision: PeriodDecision) -> None:
        self.recorded.append(decision)


def four_large(pinned: Mapping[str, Role] | None = None, load: PoolLoad | None = LOAD) -> Measurement:
    return Measurement(load, {f"gpu-{c}": Role.LARGE for c in "abcd"}, pinned or {})


def test_nothing_measured_nothing_decided() -> None:
    pools = FakePools(None)
    assert run_period(THROUGHPUT, pools) is None
    assert (pools.asked, pools.recorded) == ([], [])


def test_the_first_decision_moves_the_fewest_workers_in_name_order_and_is_recorded() -> None:
    pools = FakePools(four_large())
    decision = run_period(THROUGHPUT, pools)
    assert decision is not None and pools.recorded == [decision]
    # A fresh PID from the 4 large workers running: 4 + 0.65 x (32/17 - 4) = 2.62, rounded 3.
    assert decision.allocation.state.controlled == pytest.approx(4 + 0.65 * (32 / 17 - 4))
    assert (decision.before, decision.after, decision.pinned) == ((4, 0), (3, 1), (0, 0))
    assert decision.bounds == LargeBounds(4, 1, 4)
    assert decision.switches == (Switch("gpu-a", Role.LARGE, Role.SMALL, ok=True),)
    assert decision.switches[0].as_json() == {"worker": "gpu-a", "from": "large", "to": "small", "ok": True}


def test_pinned_workers_go_back_first_and_are_never_moved_by_the_monitor() -> None:
    pinned = {"gpu-a": Role.LARGE, "gpu-b": Role.SMALL, "gone@elsewhere": Role.SMALL}
    pools = FakePools(four_large(pinned))
    decision = run_period(THROUGHPUT, pools)
    assert decision is not None
    # gpu-b goes to its pinned pool first; then one pinned large and one pinned small bound N_large to
    # 1..3, and the fresh PID (from 3 large) aims at 1.88: 3 + 0.65 x (1.88 - 3) = 2.27, so 2 large.
    assert pools.asked == [("gpu-b", Role.SMALL), ("gpu-c", Role.SMALL)]
    assert (decision.before, decision.after, decision.pinned) == ((4, 0), (2, 2), (1, 1))
    assert decision.bounds == LargeBounds(4, 1, 3)


def test_a_refused_move_leaves_the_worker_where_it_was() -> None:
    pools = FakePools(four_large(), refuse={"gpu-a"})
    decision = run_period(THROUGHPUT, pools)
    assert decision is not None
    assert decision.switches == (Switch("gpu-a", Role.LARGE, Role.SMALL, ok=False),)
    assert (decision.allocation.large, decision.after) == (3, (4, 0))


def test_the_pid_continues_from_the_last_decision_while_the_pool_is_the_same() -> None:
    memory = PidState(controlled=2.4, integral=-1.6, error=-1.5)
    same = Measurement(LOAD, four_large().pool, {}, memory=memory, memory_bounds=LargeBounds(4, 1, 4))
    other = Measurement(LOAD, four_large().pool, {}, memory=memory, memory_bounds=LargeBounds(5, 1, 5))
    continued = run_period(THROUGHPUT, FakePools(same))
    restarted = run_period(THROUGHPUT, FakePools(other))
    assert continued is not None and restarted is not None
    assert continued.allocation.state.integral == pytest.approx(-1.6 + 32 / 17 - 2.4)
    assert restarted.allocation.state.integral == pytest.approx(32 / 17 - 4)  # afresh, from 4 large


def test_no_load_holds_the_pool() -> None:
    pools = FakePools(four_large(load=None))
    decision = run_period(THROUGHPUT, pools)
    assert decision is not None and decision.allocation.heuristic is None
    assert (decision.after, pools.asked) == ((4, 0), [])


def test_the_configuration_follows_the_settings() -> None:
    settings = load_settings(monitor_kp=0.5, monitor_max_large=3, monitor_min_small=1)
    config = MonitorConfig.from_settings(settings, mode=MonitorMode.QUALITY)
    assert config.mode is MonitorMode.QUALITY and config.gains.kp == 0.5
    assert config.limits == RoleLimits(min_large=1, max_large=3, min_small=1, max_small=None)
    assert MonitorConfig.from_settings(settings).mode is settings.monitor_mode
