"""MoDM's global monitor in the simulator: the service's own loop and policy (jobs.pools).

Every period the simulator hands the monitor a snapshot of the last period (bench.sim.pools); the monitor
runs the service's period (jobs.pools.loop.run_period) on the simulated pools: it measures Algorithm
1's inputs from the snapshot and the profiled costs -- R, H_cache, P(K = k) as counted, P_large and
P_small from the per-step costs (MoDM Table 1 calls them profiled throughputs) --, every move is
accepted, and the decision's PID state is kept for the next period, exactly as the service's beat task
does from its statistics (jobs.pools.rebalance). No worker is pinned in a simulation; the configured
per-role limits apply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.run.costs import StepCosts
from bench.sim.pools import MonitorSnapshot, PoolTargets
from core.settings import Settings
from core.vocabulary import MonitorMode, Role
from jobs.pools.loop import Measurement, MonitorConfig, PeriodDecision, run_period
from jobs.pools.policy import LargeBounds, PidState, PoolLoad, throughput_per_worker


@dataclass(frozen=True, slots=True)
class MonitorSpec:
    """How a simulated deployment runs its monitor: the service's decision (`config`) every `period_s`
    of simulated time (picklable: one monitor is built per run)."""

    config: MonitorConfig
    period_s: float

    @classmethod
    def from_settings(
        cls, settings: Settings, *, mode: MonitorMode, period_s: float | None = None
    ) -> MonitorSpec:
        """The service's configuration (gains and limits, MoDM 5.3 defaults), in `mode`."""
        return cls(
            config=MonitorConfig.from_settings(settings, mode=mode),
            period_s=float(period_s if period_s is not None else settings.monitor_period_s),
        )


@dataclass(frozen=True, slots=True)
class AllocationPoint:
    """The allocation from time `t` (seconds into the run): workers per pool, as the monitor decided."""

    t: float
    large: int
    small: int

    def as_json(self) -> dict[str, float | int]:
        return {"t": round(self.t, 3), "large": self.large, "small": self.small}


@dataclass(frozen=True, slots=True)
class LoadWindow:
    """One stretch of a run: requests offered (arrived) and served (completed) per second."""

    start_s: float
    offered_rps: float
    served_rps: float


def load_windows(
    arrivals: Sequence[float], completions: Sequence[float], window_s: float
) -> list[LoadWindow]:
    """Offered and served rates in consecutive windows of `window_s`, from the first arrival to the
    last arrival (after it, a backlog drains at any rate: it says nothing about following the load)."""
    if not arrivals or window_s <= 0:
        return []
    start, end = min(arrivals), max(arrivals)
    count = max(1, math.ceil((end - start) / window_s))
    offered, served = [0] * count, [0] * count
    for times, counts in ((arrivals, offered), (completions, served)):
        for moment in times:
            index = int((moment - start) // window_s)
            if 0 <= index < count:
                counts[index] += 1
    return [
        LoadWindow(start + i * window_s, offered[i] / window_s, served[i] / window_s) for i in range(count)
    ]


def step_cost_ms(step_ms: float, decode_ms: float, steps: int) -> float:
    """A model's time per step as the service measures it: the run's wall time over its steps, so the
    decode that ends every run is spread over the T steps of a full one."""
    return step_ms + decode_ms / steps


@dataclass
class SimulatedMonitor:
    """A bench.sim.pools.PoolMonitor running the service's monitor period after period, the PID kept
    between periods."""

    spec: MonitorSpec
    costs: StepCosts
    steps: int
    state: PidState | None = None
    bounds: LargeBounds | None = None
    decisions: int = 0
    period_s: float = field(init=False)  # bench.sim.pools.PoolMonitor's

    def __post_init__(self) -> None:
        self.period_s = self.spec.period_s

    def load(self, snapshot: MonitorSnapshot) -> PoolLoad:
        hits = sum(snapshot.k_counts.values())
        return PoolLoad(
            request_rate=snapshot.arrivals / snapshot.period_s,
            hit_rate=snapshot.hit_rate or 0.0,
            k_rates={k: n / hits for k, n in snapshot.k_counts.items()} if hits else {},
            steps=self.steps,
            large_throughput=throughput_per_worker(
                step_cost_ms(self.costs.large_step_ms, self.costs.decode_ms, self.steps), self.steps
            ),
            small_throughput=throughput_per_worker(
                step_cost_ms(self.costs.small_step_ms, self.costs.decode_ms, self.steps), self.steps
            ),
        )

    def __call__(self, snapshot: MonitorSnapshot) -> PoolTargets | None:
        decision = run_period(self.spec.config, _SimulatedPools(self, snapshot))
        if decision is None:
            return None
        return PoolTargets(large=decision.allocation.large, small=decision.allocation.small)


@dataclass
class _SimulatedPools:
    """The simulated pools for one period (jobs.pools.loop.MonitoredPools): anonymous GPUs, as many per
    role as the current targets; a move is a change of targets, which the simulator applies."""

    monitor: SimulatedMonitor
    snapshot: MonitorSnapshot

    def measure(self) -> Measurement:
        targets = self.snapshot.targets
        pool = {f"gpu-{i:04d}": Role.LARGE for i in range(targets.large)}
        pool.update({f"gpu-{targets.large + i:04d}": Role.SMALL for i in range(targets.small)})
        return Measurement(
            self.monitor.load(self.snapshot),
            pool,
            pinned={},
            memory=self.monitor.state,
            memory_bounds=self.monitor.bounds,
        )

    def actuate(self, worker: str, role: Role) -> bool:
        return True

    def record(self, decision: PeriodDecision) -> None:
        self.monitor.state, self.monitor.bounds = decision.allocation.state, decision.bounds
        self.monitor.decisions += 1
