"""MoDM's global monitor (5.3, Algorithm 1) against worked examples computed by hand.

The examples use T = 40 and k in {10, 30} so that every product is exact in binary floating point:
the boundary cases compare equal numbers, as a hand computation does. Rates are per minute as in the
paper (the unit cancels). Common inputs unless a test says otherwise:

    N = 10 workers, P_large = 2, P_small = 4 requests/min/GPU, R = 32 requests/min, H = 0.75,
    every hit at k = 10 of T = 40, so
    W_miss = (1 - 0.75) x 32 = 8                      (Eq. 7)
    W_hit  = 0.75 x 32 x (1 - 10/40) = 18             (Eq. 8)
"""

from __future__ import annotations

import pytest

from core.vocabulary import MonitorMode, Role
from jobs.pools.policy import (
    LargeBounds,
    PidGains,
    PidState,
    PoolLoad,
    RoleLimits,
    allocate,
    choose_moves,
    hit_workload,
    large_bounds,
    miss_workload,
    pid_step,
    quality_large,
    throughput_large,
    throughput_per_worker,
)

N = 10


def load(
    rate: float = 32.0, hit_rate: float = 0.75, k_rates: dict[int, float] | None = None, **kw: float
) -> PoolLoad:
    return PoolLoad(
        request_rate=rate,
        hit_rate=hit_rate,
        k_rates=k_rates if k_rates is not None else {10: 1.0},
        steps=40,
        large_throughput=kw.get("large", 2.0),
        small_throughput=kw.get("small", 4.0),
    )


def test_workloads_follow_equations_7_and_8() -> None:
    assert miss_workload(load()) == 8.0
    assert hit_workload(load()) == 18.0
    # Eq. 8 weighs each k by the share of the steps still to run: half at k=10, half at k=30.
    assert hit_workload(load(k_rates={10: 0.5, 30: 0.5})) == 0.75 * 32 * (0.5 * 0.75 + 0.5 * 0.25)


def test_quality_mode_keeps_the_large_workers_whose_hit_constraint_holds_with_equality() -> None:
    # Available throughput for hits at n large workers (Eq. 9): 2n - 8 + 4(10 - n) = 32 - 2n.
    # Misses need ceil(8/2) = 4; n = 4, 5, 6 leave 24, 22, 20 >= 18; n = 7 leaves exactly 18
    # (the constraint is >=, so it holds); n = 8 leaves 16 < 18. Eq. 10's maximum: 7.
    assert quality_large(load(), N) == 7


def test_quality_mode_gives_up_a_large_worker_once_the_hits_stop_fitting() -> None:
    # R = 33: W_miss = 8.25, W_hit = 18.5625; available = 40 - 8.25 - 2n = 31.75 - 2n.
    # n = 7 leaves 17.75 < 18.5625; n = 6 leaves 19.75 >= 18.5625. Eq. 10's maximum: 6.
    assert quality_large(load(rate=33.0), N) == 6


def test_quality_mode_uses_every_worker_for_the_large_model_when_hits_are_light() -> None:
    # Every hit at k = 30: W_hit = 0.75 x 32 x 0.25 = 6 <= 32 - 2n for every n <= 10.
    assert quality_large(load(k_rates={30: 1.0}), N) == N
    # No traffic at all: nothing constrains, quality mode keeps the whole cluster large.
    assert quality_large(load(rate=0.0), N) == N


def test_quality_mode_under_overload_follows_algorithm_1() -> None:
    # R = 64: W_miss = 16 needs 8 large workers, which leave 40 - 16 - 16 = 8 < W_hit = 36.
    # Eq. 10 has no solution; Algorithm 1 decreases by one and breaks: 7.
    assert quality_large(load(rate=64.0), N) == 7
    # R = 96, H = 0.25: W_miss = 72 needs 36 > N workers; the loop never runs; line 29 clamps to N.
    assert quality_large(load(rate=96.0, hit_rate=0.25), N) == N


def test_throughput_mode_splits_workers_by_weighted_workload() -> None:
    # Eq. 11: W_hit_weighted = 18 / (4/2) = 9. Eq. 12: 8 / (9 + 8) x 10 = 80/17.
    assert throughput_large(load(), N) == pytest.approx(80 / 17)
    # H = 0.5, k = 20: W_miss = 16, W_hit = 0.5 x 32 x 0.5 = 8, weighted 4: 16 / 20 x 10 = 8.
    assert throughput_large(load(hit_rate=0.5, k_rates={20: 1.0}), N) == 8.0
    # Equal speeds weigh nothing: 8 / (18 + 8) x 10.
    assert throughput_large(load(small=2.0), N) == pytest.approx(80 / 26)


def test_throughput_mode_has_no_target_without_work() -> None:
    assert throughput_large(load(rate=0.0), N) is None


def test_throughput_from_per_step_time() -> None:
    # 25 ms a step, 40 steps: one request a second.
    assert throughput_per_worker(25.0, 40) == 1.0


def test_bounds_keep_a_large_worker_and_pinned_workers_where_they_are() -> None:
    free = RoleLimits()
    assert large_bounds(4, pinned_large=0, pinned_small=0, limits=free) == LargeBounds(4, 1, 4)
    assert large_bounds(4, pinned_large=2, pinned_small=1, limits=free) == LargeBounds(4, 2, 3)
    limits = RoleLimits(min_large=2, max_large=3, min_small=1, max_small=None)
    assert large_bounds(6, pinned_large=0, pinned_small=0, limits=limits) == LargeBounds(6, 2, 3)
    # Pins win over limits: three pinned small workers leave at most 3 large, whatever min_large says.
    assert large_bounds(6, pinned_large=0, pinned_small=3, limits=RoleLimits(min_large=5)) == LargeBounds(
        6, 1, 3
    )
    # Everything pinned small: the monitor cannot keep a large worker, and moves nothing.
    assert large_bounds(2, pinned_large=0, pinned_small=2, limits=free) == LargeBounds(2, 0, 0)
    with pytest.raises(ValueError, match="do not fit"):
        large_bounds(2, pinned_large=2, pinned_small=1, limits=free)


def test_the_first_decision_moves_by_kp_plus_ki_of_the_error() -> None:
    bounds = LargeBounds(N, 1, N)
    first = allocate(load(), mode=MonitorMode.THROUGHPUT, bounds=bounds, state=PidState(controlled=10.0))
    # e = 80/17 - 10 = -90/17; no previous error, so no derivative: Delta = (0.6 + 0.05) e.
    assert first.heuristic == pytest.approx(80 / 17)
    assert first.state.controlled == pytest.approx(10 - 0.65 * 90 / 17)  # 6.559
    assert (first.large, first.small) == (7, 3)
    second = allocate(load(), mode=MonitorMode.THROUGHPUT, bounds=bounds, state=first.state)
    e1, e2 = -90 / 17, 80 / 17 - first.state.controlled
    assert second.state.controlled == pytest.approx(
        first.state.controlled + 0.6 * e2 + 0.05 * (e1 + e2) + 0.05 * (e2 - e1)
    )
    assert (second.large, second.small) == (5, 5)  # 5.262


def test_quality_mode_allocation_and_its_bounds() -> None:
    # The heuristic 7 lies above max_large = 5: the PID aims at 5, not 7.
    bounds = large_bounds(N, pinned_large=0, pinned_small=0, limits=RoleLimits(max_large=5))
    decision = allocate(load(), mode=MonitorMode.QUALITY, bounds=bounds, state=PidState(controlled=5.0))
    assert (decision.heuristic, decision.setpoint) == (7.0, 5.0)
    assert (decision.large, decision.small) == (5, 5) and decision.state.integral == 0.0


def test_no_work_holds_the_pool_and_rests_the_pid() -> None:
    # A PID in the middle of a move (integral and last error left) does not keep moving on no data.
    state = PidState(controlled=3.2, integral=-2.0, error=-0.5)
    for unknown in (load(rate=0.0), None):  # no arrivals; no throughput measured yet
        decision = allocate(unknown, mode=MonitorMode.THROUGHPUT, bounds=LargeBounds(N, 1, N), state=state)
        assert decision.heuristic is None and decision.state == state
        assert (decision.large, decision.small) == (3, 7)


def step_response(size: float, periods: int) -> list[float]:
    state = PidState(controlled=0.0)
    trajectory = []
    for _ in range(periods):
        state = pid_step(PidGains(), state, size)
        trajectory.append(state.controlled)
    return trajectory


def test_pid_step_response_is_damped_within_the_stated_bounds() -> None:
    trajectory = step_response(1.0, 200)
    assert trajectory[0] == pytest.approx(0.65)  # Kp + Ki, no derivative kick
    assert trajectory[1] < 1.0 < trajectory[2]  # passes the target at the third period
    peak = max(trajectory)
    assert trajectory.index(peak) == 5 and 1.09 < peak < 1.101  # overshoot under 10.1 % of the step
    assert all(abs(x - 1.0) <= 0.05 for x in trajectory[15:])  # within 5 % from the sixteenth on
    assert abs(trajectory[-1] - 1.0) < 1e-6  # and it converges


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_rounded_allocation_never_passes_a_target_up_to_four_workers_away(size: int) -> None:
    # From 1 large worker to 1 + size, rounded as `allocate` rounds, with room above the target.
    bounds = LargeBounds(workers=20, lo=1, hi=20)
    state, target, allocations = PidState(controlled=1.0), 1 + size, []
    for _ in range(60):
        state = pid_step(PidGains(), state, float(target))
        allocations.append(int(bounds.clamp(round(state.controlled))))
    assert max(allocations) == target
    assert allocations[-20:] == [target] * 20


def test_a_larger_step_may_pass_its_target_by_the_stated_ten_percent() -> None:
    trajectory = step_response(10.0, 60)
    assert round(max(trajectory)) == 11  # 10 % of 10 workers: one worker past, then back
    assert round(trajectory[-1]) == 10


def test_moves_take_unpinned_workers_in_name_order() -> None:
    roles = {"gpu-a": Role.LARGE, "gpu-b": Role.LARGE, "gpu-c": Role.LARGE, "gpu-d": Role.SMALL}
    assert choose_moves(roles, {"gpu-a"}, 1) == {"gpu-b": Role.SMALL, "gpu-c": Role.SMALL}
    assert choose_moves(roles, set(), 4) == {"gpu-d": Role.LARGE}
    assert choose_moves(roles, {"gpu-d"}, 4) == {}  # the only small worker is pinned
    assert choose_moves(roles, set(), 3) == {}
