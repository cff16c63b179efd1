"""MoDM's global monitor (5.3, Algorithm 1): how many GPU workers should host the large model.

Once per monitoring period the monitor reads what the last period asked of the pools and sizes them:

    W_miss = (1 - H_cache) R                                         (7)
    W_hit  = H_cache R sum_k P(K = k) (1 - k / T)                    (8)

quality-optimised mode (5.3.1) keeps as many large workers as the constraints allow,

    N_large + N_small <= N                                           (6)
    N_large P_large >= W_miss                                        (7)
    (N_large P_large - W_miss) + N_small P_small >= W_hit            (9)
    max N_large subject to (6), (7), (9)                             (10)

searched as Algorithm 1 does (lines 10-19); throughput-optimised mode (5.3.2) splits the workers in
proportion to the workloads, the hit workload weighted by how much faster the small model is:

    W_hit_weighted = W_hit / (P_small / P_large)                     (11)
    N_large = W_miss / (W_hit_weighted + W_miss) x N                 (12)

A PID controller (Kp 0.6, Ki 0.05, Kd 0.05, 5.3) then moves a continuous `controlled` number of large
workers towards that target (Algorithm 1 lines 25-27), and the allocation is its rounding, kept
within bounds (line 29: at least one large worker, at most N; here also the configured minimum and
maximum per role and the pinned workers, which the monitor never moves).

Everything here is pure: no I/O, no clock. Rates may be in any unit (the paper counts requests per
minute, the service per second) as long as R, P_large and P_small share it: the equations compare
and divide them, so the unit cancels.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from core.vocabulary import MonitorMode, Role

DEFAULT_KP = 0.6
DEFAULT_KI = 0.05
DEFAULT_KD = 0.05
"""PID gains, MoDM 5.3: "With carefully tuned parameters (Kp = 0.6, Ki = 0.05, Kd = 0.05)"."""

POOL_ROLES = (Role.LARGE, Role.SMALL)
"""The roles the monitor moves workers between."""


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """What the last period asked of the pools: Algorithm 1's inputs (MoDM Table 1).

    request_rate: R, arrivals per unit of time. hit_rate: H_cache in [0, 1]. k_rates: P(K = k), the
    fraction of hits that skipped k steps (sums to 1 when there were hits). steps: T.
    large_throughput, small_throughput: P_large, P_small, full T-step requests one worker of that
    model completes per unit of time (see `throughput_per_worker`).
    """

    request_rate: float
    hit_rate: float
    k_rates: Mapping[int, float]
    steps: int
    large_throughput: float
    small_throughput: float

    def __post_init__(self) -> None:
        if self.request_rate < 0 or not 0 <= self.hit_rate <= 1:
            raise ValueError(f"need R >= 0 and H in [0, 1], got R={self.request_rate} H={self.hit_rate}")
        if self.steps < 1 or self.large_throughput <= 0 or self.small_throughput <= 0:
            raise ValueError("need T >= 1 and positive throughputs P_large and P_small")


def throughput_per_worker(ms_per_step: float, steps: int) -> float:
    """Requests per second one worker completes when each runs all T steps at `ms_per_step`.

    The service records each task's wall time and the steps it ran; their ratio is the model's cost
    per step (decode and bookkeeping included, spread over the steps), and a full request costs T."""
    if ms_per_step <= 0 or steps < 1:
        raise ValueError("need a positive time per step and at least one step")
    return 1000.0 / (ms_per_step * steps)


def miss_workload(load: PoolLoad) -> float:
    """W_miss, Eq. 7 (Algorithm 1 line 3): requests that need a full generation on the large model."""
    return (1.0 - load.hit_rate) * load.request_rate


def hit_workload(load: PoolLoad) -> float:
    """W_hit, Eq. 8 (lines 5-8): hits, each weighted by the share (1 - k/T) of the steps it still runs."""
    refine = sum(rate * (1.0 - k / load.steps) for k, rate in load.k_rates.items())
    return load.hit_rate * load.request_rate * refine


def quality_large(load: PoolLoad, workers: int) -> int:
    """N_large in quality-optimised mode, exactly as Algorithm 1 lines 10-19 search Eq. 10.

    Start at the fewest large workers the misses need (Eq. 7, ceil(W_miss / P_large)) and add one while
    the hit constraint (Eq. 9, with N_small = N - N_large) still holds. The results, case by case:
    - the constraints hold from that start up to some n < N: that n, the optimum of Eq. 10;
    - they hold all the way to N: N (the loop exits at N + 1, which line 29 clamps to N);
    - the misses alone need more than N workers: N (the loop never runs; line 29 clamps);
    - the hits do not fit even at the start (overload, Eq. 10 has no solution): one fewer than the
      misses need, which is what the loop's "decrease by 1 and break" gives (never below 0 here;
      the bounds of `allocate` then keep at least one large worker, line 29).
    """
    misses, hits = miss_workload(load), hit_workload(load)
    large = math.ceil(misses / load.large_throughput)
    while large <= workers:
        available = large * load.large_throughput - misses + (workers - large) * load.small_throughput
        if available >= hits:
            large += 1
            continue
        large -= 1
        break
    return min(max(large, 0), workers)


def throughput_large(load: PoolLoad, workers: int) -> float | None:
    """N_large in throughput-optimised mode, Eqs. 11-12 (Algorithm 1 lines 21-24); not rounded.

    None when the period had no work at all (0/0 in Eq. 12): there is nothing to balance."""
    misses = miss_workload(load)
    weighted_hits = hit_workload(load) / (load.small_throughput / load.large_throughput)
    if misses + weighted_hits <= 0:
        return None
    return misses / (weighted_hits + misses) * workers


def heuristic_large(load: PoolLoad, workers: int, mode: MonitorMode) -> float | None:
    """Algorithm 1's target before the PID: the mode's N_large for `workers` GPUs."""
    if mode is MonitorMode.QUALITY:
        return float(quality_large(load, workers))
    return throughput_large(load, workers)


# --- the PID controller (Algorithm 1 lines 1, 25-27) -------------------------------------------


@dataclass(frozen=True, slots=True)
class PidGains:
    kp: float = DEFAULT_KP
    ki: float = DEFAULT_KI
    kd: float = DEFAULT_KD


@dataclass(frozen=True, slots=True)
class PidState:
    """The controller's memory between periods.

    controlled: Algorithm 1's current_num_large, a continuous number of large workers.
    integral: the sum of the errors so far. error: the last error (None before the first step)."""

    controlled: float
    integral: float = 0.0
    error: float | None = None


def pid_step(gains: PidGains, state: PidState, setpoint: float) -> PidState:
    """One period: Delta = PID(setpoint, controlled); controlled += Delta (Algorithm 1 lines 26-27).

    The time step is one monitoring period (the paper's gains are per decision). The first step has
    no previous error, so no derivative term: a new target moves the pool through Kp and Ki only,
    without a derivative kick.

    Damping with MoDM's gains, for a step of size S in the setpoint (the closed loop is
    e[n+1] = 1.3 e[n] - 0.3 e[n-1] - 0.05 e[n-2], poles 0.91, 0.5 and -0.11): `controlled` reaches
    0.65 S at once, passes S at the third period, peaks at 1.10 S (overshoot under 10.1 % of the
    step) at the sixth and stays within 5 % of the target from the sixteenth on. Rounded to whole
    workers, a step of up to 4 workers never goes past its target.
    """
    error = setpoint - state.controlled
    integral = state.integral + error
    derivative = 0.0 if state.error is None else error - state.error
    delta = gains.kp * error + gains.ki * integral + gains.kd * derivative
    return PidState(controlled=state.controlled + delta, integral=integral, error=error)


# --- bounds and the allocation ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LargeBounds:
    """The numbers of large workers allowed, lo..hi inclusive, for `workers` pool workers."""

    workers: int
    lo: int
    hi: int

    def clamp(self, value: float) -> float:
        return min(max(value, float(self.lo)), float(self.hi))


@dataclass(frozen=True, slots=True)
class RoleLimits:
    """Configured limits per role (settings.monitor_min_large and the like); None: no maximum."""

    min_large: int = 1
    max_large: int | None = None
    min_small: int = 0
    max_small: int | None = None


def large_bounds(workers: int, *, pinned_large: int, pinned_small: int, limits: RoleLimits) -> LargeBounds:
    """How many of `workers` pool workers may host the large model.

    Constraints in order of precedence; one that cannot hold together with those before it is dropped:
    1. pinned workers stay where they are: pinned_large <= N_large <= workers - pinned_small;
    2. at least one large worker, at most N (MoDM Algorithm 1 line 29);
    3. limits.min_large <= N_large <= limits.max_large;
    4. limits.min_small <= workers - N_large <= limits.max_small.
    """
    if pinned_large + pinned_small > workers or min(pinned_large, pinned_small, workers) < 0:
        raise ValueError(f"{pinned_large} + {pinned_small} pinned workers do not fit in {workers}")
    lo, hi = pinned_large, workers - pinned_small

    def narrow(low: float, high: float) -> None:
        nonlocal lo, hi
        new_lo, new_hi = max(lo, math.ceil(low)), min(hi, math.floor(high))
        if new_lo <= new_hi:
            lo, hi = new_lo, new_hi

    narrow(1, workers)
    narrow(limits.min_large, limits.max_large if limits.max_large is not None else workers)
    max_small = limits.max_small if limits.max_small is not None else workers
    narrow(workers - max_small, workers - limits.min_small)
    return LargeBounds(workers=workers, lo=lo, hi=hi)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One decision. heuristic: Algorithm 1's N_large (None: no work, the target is held);
    setpoint: what the PID aimed at (the heuristic within bounds); state: the PID after this period;
    large, small: the allocation to apply."""

    heuristic: float | None
    setpoint: float
    state: PidState
    large: int
    small: int


def allocate(
    load: PoolLoad | None,
    *,
    mode: MonitorMode,
    bounds: LargeBounds,
    state: PidState,
    gains: PidGains = PidGains(),  # frozen: one shared default is safe
) -> Allocation:
    """Algorithm 1 for one period: the mode's target, smoothed by the PID, rounded and bounded.

    The target is clamped into `bounds` before the PID sees it, so the integral never accumulates an
    error the pool could not close (the paper clamps only the final number, line 29). With no work in
    the period, or no load at all (None: the throughputs are not known yet), there is no target: the
    PID does not step (its memory is kept as it was) and the pool holds. Rounding is Python's, as in
    the paper's line 29 (halves to even).
    """
    heuristic = heuristic_large(load, bounds.workers, mode) if load is not None else None
    if heuristic is None:
        setpoint, after = state.controlled, state
    else:
        setpoint = bounds.clamp(heuristic)
        after = pid_step(gains, state, setpoint)
    large = int(bounds.clamp(round(after.controlled)))
    return Allocation(
        heuristic=heuristic, setpoint=setpoint, state=after, large=large, small=bounds.workers - large
    )


def resume_state(
    previous: PidState | None, previous_bounds: LargeBounds | None, bounds: LargeBounds, current_large: int
) -> PidState:
    """The PID state a decision starts from: the previous decision's, while the pool is the same.

    The first decision, and the first after the pool changed (a worker joined or left, a pin moved the
    bounds), start afresh from the large workers running now: the old memory describes another pool."""
    if previous is None or previous_bounds != bounds:
        return PidState(controlled=bounds.clamp(current_large))
    return previous


def choose_moves(roles: Mapping[str, Role], pinned: Collection[str], target_large: int) -> dict[str, Role]:
    """Which workers change role to reach `target_large` large workers: {worker: new role}.

    Only unpinned large and small workers move, as few as possible, in name order (deterministic, so a
    repeated decision moves the same workers). Fewer moves than needed when not enough can move."""
    large = sum(1 for role in roles.values() if role is Role.LARGE)
    source, destination = (Role.LARGE, Role.SMALL) if large > target_large else (Role.SMALL, Role.LARGE)
    movable = sorted(name for name, role in roles.items() if role is source and name not in pinned)
    return {name: destination for name in movable[: abs(large - target_large)]}
