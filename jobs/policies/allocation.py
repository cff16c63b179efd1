"""DiffServe's resource allocation (3.3): the confidence threshold and the workers per model, co-tuned
by a mixed-integer linear program solved every period, which also chooses each model's batch size among
the profiled ones. The simulator (bench.sim.cascade) profiles every size up to REPRISE_MAX_BATCH from
the measured batch slowdown and runs the workers at the chosen sizes. The service (jobs.pools.diffserve)
profiles one size, b = 1, from the service times it measures: its workers batch on their own, up to
REPRISE_MAX_BATCH jobs sharing each step (workers.runtime.batch_loop), so there only the threshold and
the split are chosen.

    max  t
    s.t. e(b1) + q(b1) + e(b2) + q(b2) <= L          latency of an escalated query, SLO L     (1)
         x1 T1(b1) >= lambda D_light                 the light model serves every query       (2)
         x2 T2(b2) >= lambda D f(t)                  the heavy model serves the escalated      (3)
         x1 + x2 = S                                 every worker hosts one of the two         (4)

t is one of a grid (f(t) has no closed form: one binary u_j per threshold); b1, b2 are one of the
profiled batch sizes (binaries y); x_i T_i(b_i) is linearised with integers z_ib = x_i y_ib. The
queueing delay follows Little's law, W = L / lambda, from the queue lengths and rates measured (3.3),
plus the time a batch of b takes to fill. lambda = 1.05 over-provisions the estimated demand (3.3).

Two refinements of the paper, both stated in the plan returned:
- (4) is an equality: a worker of this service always hosts a model, and among the allocations that
  reach the best t the second solve keeps the one with the most headroom, max m with
  x_i T_i(b_i) >= (1 + m) lambda D_i (a lexicographic objective: t first, then headroom).
- D_light may exceed D: where the cache sends hits to the same (small) model, their T-k steps are
  light-model work too (the `reprise` mode: hits to the small pool, misses into the cascade).

When no allocation meets the SLO and the demand, the program is infeasible and the plan says so
(feasible False, `fallback` says why). DiffServe states no fallback; ours is the fewest escalations, the
lowest threshold of the grid (the least heavy work, so the queues that broke the SLO drain soonest), in
two steps: when the demand alone can be served, the allocation with the most headroom at that threshold
(the latency bound (1) dropped: at b = 1 no threshold or split changes the measured queueing it
reads); when not even that, the workers split in proportion to the work (MoDM 5.3.2's rule), the most
queries per second the pool can serve. Never the highest threshold that merely keeps up: escalating
everything when the SLO is already broken only lengthens the heavy queue.

Pure: scipy's HiGHS and no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from jobs.policies.cascade import EscalationCurve

OVERPROVISION = 1.05
"""lambda: "we use lambda D as the estimated query demand ... set to 1.05 by default" (DiffServe 3.3)."""

DEMAND_EWMA_ALPHA = 0.5
"""Weight of the newest period in the demand estimate. DiffServe 3.3 estimates demand "using an
exponentially weighted moving average on demand history" without giving the weight: ours."""

SLO_OVER_HEAVY = 2.8
"""The SLO when none is configured, as a multiple of the heavy model's latency: DiffServe 4.1 sets 5 s
for SD 1.5 at 1.78 s per image (2.8x) and 15 s for SDXL at 6.1 s (2.5x)."""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model's execution latency in seconds per batch size (DiffServe 3.3: "execution latency can
    be accurately predicted and profiled across different batch sizes")."""

    name: str
    latency_s: Mapping[int, float]

    def __post_init__(self) -> None:
        if not self.latency_s or any(b < 1 or not e > 0 for b, e in self.latency_s.items()):
            raise ValueError(f"{self.name}: need batch sizes >= 1 with positive latencies")

    def throughput(self, batch: int) -> float:
        """T(b): queries per second one worker serves at batch size b."""
        return batch / self.latency_s[batch]

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(sorted(self.latency_s))


@dataclass(frozen=True, slots=True)
class Demand:
    """What the period asks. cascade_rps: D, queries entering the cascade (their light stage; f(t) of
    them go on). light_rps: all light-model work in full light generations per second (D, plus cached
    hits served on the same model). light_wait_s, heavy_wait_s: measured queueing (Little's law).
    heavy_extra_rps: heavy work outside the cascade, in full heavy generations per second."""

    cascade_rps: float
    light_rps: float | None = None
    light_wait_s: float = 0.0
    heavy_wait_s: float = 0.0
    heavy_extra_rps: float = 0.0  # heavy-model work outside the cascade (hits only it can resume)

    @property
    def light(self) -> float:
        return self.cascade_rps if self.light_rps is None else self.light_rps


@dataclass(frozen=True, slots=True)
class AllocationProblem:
    light: ModelProfile
    heavy: ModelProfile
    demand: Demand
    curve: EscalationCurve
    workers: int  # S
    slo_s: float  # L
    heavy_bounds: tuple[int, int] = (0, 10**6)  # the pool's limits and pins on x2
    overprovision: float = OVERPROVISION


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """The decision. feasible: the MILP met demand and SLO; latency_met: bound (1) held; fallback: why
    the stated fallback was taken instead (None when the MILP answered)."""

    threshold: float
    light_workers: int
    heavy_workers: int
    light_batch: int
    heavy_batch: int
    escalated: float  # f(threshold)
    feasible: bool
    latency_met: bool
    objective: float | None
    headroom: float | None
    solve_ms: float
    fallback: str | None = None
    capacity: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "light_workers": self.light_workers,
            "heavy_workers": self.heavy_workers,
            "light_batch": self.light_batch,
            "heavy_batch": self.heavy_batch,
            "escalated": self.escalated,
            "feasible": self.feasible,
            "latency_met": self.latency_met,
            "objective": self.objective,
            "headroom": self.headroom,
            "solve_ms": self.solve_ms,
            "fallback": self.fallback,
            "capacity": self.capacity,
        }


def solve_allocation(problem: AllocationProblem) -> AllocationPlan:
    """The period's plan (see the module docstring)."""
    if problem.workers < 1:
        raise ValueError("the pool has no worker to allocate")
    started = time.perf_counter()
    program = _Program(problem)
    chosen = program.best_threshold(with_latency=True)
    if chosen is not None:
        solution, headroom = program.most_headroom(chosen, with_latency=True)
        return program.plan(solution, headroom, latency_met=True, started=started)
    if program.best_threshold(with_latency=False) is not None:  # f is non-decreasing: the lowest fits too
        solution, headroom = program.most_headroom(0, with_latency=False)
        return program.plan(solution, headroom, latency_met=False, started=started)
    return _fallback(problem, started)


class _Program:
    """The MILP's matrices. Variables: u (thresholds), y1, y2 (batch choices), z1, z2 (workers per
    batch choice), m (headroom)."""

    def __init__(self, problem: AllocationProblem) -> None:
        self.p = problem
        self.ts = np.asarray(problem.curve.thresholds, dtype=float)
        self.fs = np.asarray(problem.curve.escalated, dtype=float)
        self.b1, self.b2 = problem.light.batches, problem.heavy.batches
        sizes = (len(self.ts), len(self.b1), len(self.b2), len(self.b1), len(self.b2), 1)
        offsets = np.cumsum((0, *sizes))
        self.u, self.y1, self.y2, self.z1, self.z2, self.m = (
            slice(int(offsets[i]), int(offsets[i + 1])) for i in range(6)
        )
        self.n = int(offsets[-1])
        demand = problem.demand
        self.need_light = problem.overprovision * demand.light
        self.need_cascade = problem.overprovision * demand.cascade_rps
        self.need_heavy_extra = problem.overprovision * demand.heavy_extra_rps

    def _row(self, **parts: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
        row = np.zeros(self.n)
        for name, values in parts.items():
            row[getattr(self, name)] = values
        return row

    def _constraints(self, *, with_latency: bool) -> list[LinearConstraint]:
        p, s = self.p, self.p.workers
        t1 = np.array([p.light.throughput(b) for b in self.b1])
        t2 = np.array([p.heavy.throughput(b) for b in self.b2])
        rows: list[tuple[np.ndarray[Any, np.dtype[np.float64]], float, float]] = [
            (self._row(u=1.0), 1.0, 1.0),
            (self._row(y1=1.0), 1.0, 1.0),
            (self._row(y2=1.0), 1.0, 1.0),
            (self._row(z1=1.0, z2=1.0), s, s),  # (4)
            (self._row(z2=1.0), p.heavy_bounds[0], p.heavy_bounds[1]),
            (self._row(z1=t1), self.need_light, np.inf),  # (2)
            (self._row(z2=t2, u=-self.need_cascade * self.fs), self.need_heavy_extra, np.inf),  # (3)
        ]
        for i in range(len(self.b1)):  # z1_b <= S y1_b
            rows.append((self._unit(self.z1, i) - s * self._unit(self.y1, i), -np.inf, 0.0))
        for i in range(len(self.b2)):
            rows.append((self._unit(self.z2, i) - s * self._unit(self.y2, i), -np.inf, 0.0))
        if with_latency:  # (1): execution and queueing of both stages
            demand = p.demand
            rate1, rate2 = max(self.need_light, 1e-9), max(self.need_cascade * self.fs.max(), 1e-9)
            e1 = [p.light.latency_s[b] + demand.light_wait_s + (b - 1) / rate1 for b in self.b1]
            e2 = [p.heavy.latency_s[b] + demand.heavy_wait_s + (b - 1) / rate2 for b in self.b2]
            rows.append((self._row(y1=e1, y2=e2), -np.inf, p.slo_s))
        matrix = np.vstack([row for row, _, _ in rows])
        return [LinearConstraint(matrix, [lo for _, lo, _ in rows], [hi for _, _, hi in rows])]

    def _unit(self, part: slice, index: int) -> np.ndarray[Any, np.dtype[np.float64]]:
        row = np.zeros(self.n)
        row[part.start + index] = 1.0
        return row

    def _solve(
        self,
        objective: np.ndarray[Any, np.dtype[np.float64]],
        constraints: list[LinearConstraint],
        bounds: Bounds,
    ) -> np.ndarray[Any, np.dtype[np.float64]] | None:
        integrality = np.ones(self.n)
        integrality[self.m] = 0
        result = milp(objective, constraints=constraints, integrality=integrality, bounds=bounds)
        return None if result.x is None or result.status != 0 else np.asarray(result.x)

    def _bounds(self, fixed_threshold: int | None = None) -> Bounds:
        lower, upper = np.zeros(self.n), np.ones(self.n)
        upper[self.z1], upper[self.z2] = self.p.workers, self.p.workers
        lower[self.m], upper[self.m] = -1.0, 1e6
        if fixed_threshold is not None:
            lower[self.u.start + fixed_threshold] = 1.0
        return Bounds(lower, upper)

    def best_threshold(self, *, with_latency: bool) -> int | None:
        """Stage one: the highest threshold any allocation serves; its index in the grid."""
        solution = self._solve(
            -self._row(u=self.ts), self._constraints(with_latency=with_latency), self._bounds()
        )
        return None if solution is None else int(np.argmax(solution[self.u]))

    def most_headroom(
        self, threshold: int, *, with_latency: bool
    ) -> tuple[np.ndarray[Any, np.dtype[np.float64]], float | None]:
        """Stage two: at that threshold, the allocation with the most headroom over both demands."""
        p = self.p
        constraints = self._constraints(with_latency=with_latency)
        rows, needs = [], []
        t1 = np.array([p.light.throughput(b) for b in self.b1])
        t2 = np.array([p.heavy.throughput(b) for b in self.b2])
        escalated = self.need_cascade * float(self.fs[threshold]) + self.need_heavy_extra
        for need, part, speeds in ((self.need_light, "z1", t1), (escalated, "z2", t2)):
            if need > 0:  # x T - m need >= need, i.e. x T >= (1 + m) need
                rows.append(self._row(**{part: speeds}) - need * self._unit(self.m, 0))
                needs.append(need)
        if not rows:  # no demand at all: nothing to be spare over; stage one's answer stands
            solution = self._solve(-self._row(u=self.ts), constraints, self._bounds(threshold))
            assert solution is not None
            return solution, None
        constraints.append(LinearConstraint(np.vstack(rows), needs, np.inf))
        solution = self._solve(-self._unit(self.m, 0), constraints, self._bounds(threshold))
        assert solution is not None  # stage one found this threshold feasible
        return solution, float(solution[self.m][0])

    def plan(
        self,
        x: np.ndarray[Any, np.dtype[np.float64]],
        headroom: float | None,
        *,
        latency_met: bool,
        started: float,
    ) -> AllocationPlan:
        j = int(np.argmax(x[self.u]))
        b1 = self.b1[int(np.argmax(x[self.y1]))]
        b2 = self.b2[int(np.argmax(x[self.y2]))]
        light, heavy = round(float(x[self.z1].sum())), round(float(x[self.z2].sum()))
        return AllocationPlan(
            threshold=float(self.ts[j]),
            light_workers=light,
            heavy_workers=heavy,
            light_batch=b1,
            heavy_batch=b2,
            escalated=float(self.fs[j]),
            feasible=latency_met,
            latency_met=latency_met,
            objective=float(self.ts[j]) if latency_met else None,  # infeasible: no optimum, a fallback
            headroom=headroom,
            solve_ms=(time.perf_counter() - started) * 1e3,
            fallback=None
            if latency_met
            else (
                f"infeasible: no allocation meets the {self.p.slo_s:.3g} s SLO at the measured queueing; "
                f"lowest threshold {self.ts[j]:g} (the fewest escalations), the most headroom"
            ),
            capacity=_capacity(self.p, light, heavy, b1, b2),
        )


def _capacity(problem: AllocationProblem, light: int, heavy: int, b1: int, b2: int) -> dict[str, float]:
    return {
        "light_rps": light * problem.light.throughput(b1),
        "heavy_rps": heavy * problem.heavy.throughput(b2),
    }


def _fallback(problem: AllocationProblem, started: float) -> AllocationPlan:
    """The stated fallback: the lowest threshold (the fewest escalations) and the workers split in
    proportion to each model's work at it, every worker at its fastest batch size."""
    curve, s = problem.curve, problem.workers
    b1 = max(problem.light.batches, key=problem.light.throughput)
    b2 = max(problem.heavy.batches, key=problem.heavy.throughput)
    need_light = problem.overprovision * problem.demand.light
    demand = problem.demand
    need_heavy = problem.overprovision * (demand.cascade_rps * curve.escalated[0] + demand.heavy_extra_rps)
    work_light = need_light / problem.light.throughput(b1)
    work_heavy = need_heavy / problem.heavy.throughput(b2)
    total = work_light + work_heavy
    heavy = round(s * work_heavy / total) if total > 0 else 0
    if work_heavy > 0:
        heavy = max(heavy, 1)
    if work_light > 0 and s > 1:
        heavy = min(heavy, s - 1)
    lo, hi = problem.heavy_bounds
    heavy = max(lo, min(hi, heavy, s))
    capacity = _capacity(problem, s - heavy, heavy, b1, b2)
    return AllocationPlan(
        threshold=curve.thresholds[0],
        light_workers=s - heavy,
        heavy_workers=heavy,
        light_batch=b1,
        heavy_batch=b2,
        escalated=curve.escalated[0],
        feasible=False,
        latency_met=False,
        objective=None,
        headroom=None,
        solve_ms=(time.perf_counter() - started) * 1e3,
        fallback=(
            f"infeasible: {need_light:.3g} light and {need_heavy:.3g} heavy queries/s (lambda D) exceed what "
            f"{s} workers serve; lowest threshold {curve.thresholds[0]:g}, workers split by work"
        ),
        capacity=capacity,
    )


def with_backlog(demand: Demand, *, light_queued: int, heavy_queued: int, drain_s: float) -> Demand:
    """The demand with the queues now waiting to be served within `drain_s` too (our addition: the
    paper's demand is the arrival rate alone, so once a queue has built up a plan that merely keeps up
    never drains it, and every later query waits behind it). A light stage waiting may escalate like
    any other (it counts as a cascade query); an escalated one waiting is heavy work."""
    if drain_s <= 0:
        raise ValueError("the drain time must be positive")
    light_extra, heavy_extra = light_queued / drain_s, heavy_queued / drain_s
    return replace(
        demand,
        cascade_rps=demand.cascade_rps + light_extra,
        light_rps=demand.light + light_extra,
        heavy_extra_rps=demand.heavy_extra_rps + heavy_extra,
    )


def ewma(previous: float | None, observed: float, alpha: float = DEMAND_EWMA_ALPHA) -> float:
    """The demand estimate after a period that saw `observed` (DiffServe 3.3)."""
    return (
        observed
        if previous is None or not math.isfinite(previous)
        else alpha * observed + (1 - alpha) * previous
    )
