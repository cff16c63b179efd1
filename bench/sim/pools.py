"""The simulator's GPU workers, grouped by role, and the hook a pool monitor plugs into.

Worker counts per role live in one place, `Pools.targets`. A `PoolMonitor` (MoDM 5.3's global
monitor with its PID controller, bench.sim.monitor, is the intended one) is called every `period_s` of
simulated time with a `MonitorSnapshot` of the last period and may return new targets; idle workers
then switch roles at once, busy ones when their job ends, each paying `switch_s` to load the other
model (a worker hosts one model at a time, MoDM Eq. 6).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from core.vocabulary import Role
from jobs.pools.policy import POOL_ROLES


@dataclass(frozen=True, slots=True)
class PoolTargets:
    """How many workers should host each model."""

    large: int
    small: int

    def __post_init__(self) -> None:
        if self.large < 0 or self.small < 0:
            raise ValueError(f"worker counts must not be negative: large={self.large} small={self.small}")

    @property
    def total(self) -> int:
        return self.large + self.small

    def of(self, role: Role) -> int:
        return self.large if role is Role.LARGE else self.small


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """What a monitor sees at the end of one period (MoDM Table 1: H_cache, R, P(K = k))."""

    now_s: float
    period_s: float
    arrivals: int
    hits: int
    misses: int
    k_counts: Mapping[int, int]
    queued: Mapping[Role, int]
    targets: PoolTargets

    @property
    def request_rate_per_min(self) -> float:
        return self.arrivals * 60.0 / self.period_s if self.period_s > 0 else 0.0

    @property
    def hit_rate(self) -> float | None:
        admitted = self.hits + self.misses
        return self.hits / admitted if admitted else None


@dataclass(slots=True)
class PeriodDemand:
    """What was admitted since an allocator last looked: MoDM's monitor reads its arrivals, hits, misses
    and hits' k (a MonitorSnapshot), DiffServe's controller its misses and the light pool's seconds asked."""

    counts: Counter[str] = field(default_factory=Counter)
    k_counts: Counter[int] = field(default_factory=Counter)
    light_work_s: float = 0.0  # light-pool seconds asked this period (the cascade's allocator)

    def admit(self, k: int | None) -> None:
        """One admission: a hit with its k, or a miss."""
        self.counts["arrivals"] += 1
        self.counts["hits" if k is not None else "misses"] += 1
        if k is not None:
            self.k_counts[k] += 1

    def snapshot(
        self, now_s: float, period_s: float, queued: Mapping[Role, int], targets: PoolTargets
    ) -> MonitorSnapshot:
        return MonitorSnapshot(
            now_s=now_s,
            period_s=period_s,
            arrivals=self.counts["arrivals"],
            hits=self.counts["hits"],
            misses=self.counts["misses"],
            k_counts=dict(self.k_counts),
            queued=queued,
            targets=targets,
        )

    def clear(self) -> None:
        """A new period."""
        self.counts.clear()
        self.k_counts.clear()
        self.light_work_s = 0.0


class PoolMonitor(Protocol):
    """Decides worker counts per role. Must keep the total unchanged; None keeps the current targets."""

    period_s: float

    def __call__(self, snapshot: MonitorSnapshot) -> PoolTargets | None: ...


@dataclass(slots=True)
class Worker:
    """One GPU. `jobs`: the requests it runs (seq -> work left, in milliseconds of a batch of one), up to
    `capacity` at once (step-level batching: one UNet call per step for all of them); `available_s`
    ends a role switch; `done_s` is when its next job ends (the pending DONE event), None when empty."""

    worker_id: int
    role: Role
    capacity: int = 1
    jobs: dict[int, float] = field(default_factory=dict)
    models: dict[int, tuple[str, float]] = field(default_factory=dict)  # seq -> its model, its step ms
    platform: dict[int, float] = field(default_factory=dict)  # seq -> platform ms left after its steps
    device_ms: float = 0.0  # time spent on the model calls so far (bench.sim.platform's calibration)
    available_s: float = 0.0
    updated_s: float = 0.0
    done_s: float | None = None
    retired: bool = False  # scaled in by the autoscaler (bench.sim.autoscale): not part of the fleet

    def idle(self, now_s: float) -> bool:
        return not self.retired and not self.jobs and self.available_s <= now_s

    def has_slot(self, now_s: float) -> bool:
        return not self.retired and len(self.jobs) < self.capacity and self.available_s <= now_s

    def take(
        self, seq: int, work_ms: float, model: str, step_ms: Mapping[str, float], platform_ms: float = 0.0
    ) -> None:
        """Start a job of `work_ms` (a batch of one's milliseconds) on `model`, whose step costs
        step_ms[model]: what its batch shares (`rates`); then `platform_ms` of the job's own platform
        work (bench.sim.platform), which no batch shares."""
        self.jobs[seq] = work_ms
        self.models[seq] = (model, step_ms[model])
        if platform_ms > 0:
            self.platform[seq] = platform_ms

    def _denoising(self) -> list[int]:
        """The jobs still in their model calls (the others are in their platform work)."""
        return [seq for seq, left in self.jobs.items() if left > 1e-6 or seq not in self.platform]

    def rates(self, slowdown: Callable[[int], float]) -> dict[int, float]:
        """Milliseconds of its present work each job does per millisecond. The jobs of one model share
        one UNet call a step: n of them progress 1 / slowdown(n) as fast as one alone (a batch of n steps
        slowdown(n) times as long). A worker hosting two models (a co-hosting small worker) runs one
        batch a model, and the two calls take turns on the device (workers.runtime.batch_loop, a loop a
        model): a round of one step of each lasts the sum of slowdown(n_m) x step_m over the models m,
        in which a job of model m does step_m of its work. A job past its steps does its platform work
        alone: the worker's time is shared evenly between the batch and each such job (one process's
        time, work-conserving; with no platform work the batch has it all, as before)."""
        denoising = self._denoising()
        after = [seq for seq in self.jobs if seq not in denoising]
        share = 1.0 / ((1 if denoising else 0) + len(after)) if self.jobs else 1.0
        rates = dict.fromkeys(after, share)
        model_of = {seq: self.models.get(seq, ("", 1.0)) for seq in denoising}  # one model unless taken
        groups = Counter(model_of.values())
        if len(groups) <= 1:
            return rates | dict.fromkeys(denoising, share / slowdown(len(denoising)))
        round_ms = sum(slowdown(n) * step for (_, step), n in groups.items())
        return rates | {seq: share * model_of[seq][1] / round_ms for seq in denoising}

    def _device_share(self) -> float:
        """The share of the worker's time its model calls take now."""
        denoising = self._denoising()
        if not denoising:
            return 0.0
        return 1.0 / (1 + len(self.jobs) - len(denoising))

    def advance(self, now_s: float, slowdown: Callable[[int], float]) -> None:
        """Run the jobs from updated_s to now, each at its rate (`rates`): its steps, then its platform
        work (a phase ends at an event: `next_done` schedules one at each)."""
        if self.jobs and now_s > self.updated_s:
            elapsed_ms = (now_s - self.updated_s) * 1000.0
            rates = self.rates(slowdown)
            self.device_ms += elapsed_ms * self._device_share()
            denoising = set(self._denoising())
            for seq in list(self.jobs):
                if seq in denoising:
                    self.jobs[seq] -= elapsed_ms * rates[seq]
                else:
                    self.platform[seq] -= elapsed_ms * rates[seq]
        self.updated_s = now_s

    def next_done(self, now_s: float, slowdown: Callable[[int], float]) -> float | None:
        """When the first job ends its steps or its platform work, if no job joins or leaves before."""
        if not self.jobs:
            return None
        rates = self.rates(slowdown)
        denoising = set(self._denoising())
        left = {seq: self.jobs[seq] if seq in denoising else self.platform[seq] for seq in self.jobs}
        return now_s + min(max(0.0, ms) / rates[seq] for seq, ms in left.items()) / 1000.0

    def finished(self) -> list[int]:
        """Remove and return the jobs whose work is done, steps and platform work (within a nanosecond
        of rounding)."""
        ended = [
            seq for seq, left in self.jobs.items() if left <= 1e-6 and self.platform.get(seq, 0.0) <= 1e-6
        ]
        for seq in ended:
            del self.jobs[seq]
            self.models.pop(seq, None)
            self.platform.pop(seq, None)
        return ended


class Pools:
    """The workers, and the targets per role they converge to."""

    def __init__(self, targets: PoolTargets, *, switch_s: float = 0.0, capacity: int = 1) -> None:
        if targets.total < 1:
            raise ValueError("the simulation needs at least one worker")
        if switch_s < 0:
            raise ValueError("switch_s must not be negative")
        if capacity < 1:
            raise ValueError("a worker runs at least one job")
        self.targets = targets
        self.switch_s = switch_s
        self.switches = 0
        self.capacity = {Role.LARGE: capacity, Role.SMALL: capacity}  # jobs a worker of the role runs at once
        self.workers = [Worker(i, Role.LARGE, capacity) for i in range(targets.large)] + [
            Worker(targets.large + i, Role.SMALL, capacity) for i in range(targets.small)
        ]

    def hosting(self, role: Role) -> int:
        return sum(1 for worker in self.workers if worker.role is role and not worker.retired)

    @property
    def fleet(self) -> int:
        return sum(1 for worker in self.workers if not worker.retired)

    def resize(self, total: int, now_s: float, *, start_s: float, grow: Role) -> None:
        """The autoscaler's fleet of `total`: new workers host `grow` and serve after `start_s`; a
        smaller fleet retires idle workers only, of the role furthest above its target first. The
        targets follow the fleet as it is (the monitor re-splits it at its next period)."""
        if total < 1:
            raise ValueError("the fleet keeps at least one worker")
        for worker in self.workers:
            if self.fleet >= total:
                break
            if worker.retired and not worker.jobs:
                worker.retired, worker.role, worker.available_s = False, grow, now_s + self.switch_s + start_s
                worker.capacity = self.capacity[grow]
        while self.fleet < total:
            joined = Worker(len(self.workers), grow, self.capacity[grow], available_s=now_s + start_s)
            self.workers.append(joined)
        idle = [worker for worker in self.workers if worker.idle(now_s)]
        idle.sort(key=lambda worker: self.targets.of(worker.role) - self.hosting(worker.role))
        for worker in idle:
            if self.fleet <= total:
                break
            if worker.role is not Role.LARGE or self.hosting(Role.LARGE) > 1:  # misses keep a worker
                worker.retired = True
        self.targets = PoolTargets(large=self.hosting(Role.LARGE), small=self.hosting(Role.SMALL))

    def set_capacity(self, role: Role, jobs: int) -> None:
        """Jobs each worker of `role` runs at once from now on (a batch size DiffServe's MILP chose); a
        worker holding more finishes them and takes no new one until it is under the size."""
        if jobs < 1:
            raise ValueError("a worker runs at least one job")
        self.capacity[role] = jobs
        for worker in self.workers:
            if worker.role is role:
                worker.capacity = jobs

    def set_targets(self, targets: PoolTargets) -> None:
        if targets.total != self.targets.total:
            raise ValueError(f"a monitor must keep {self.targets.total} workers, not {targets.total}")
        self.targets = targets

    def rebalance(self, now_s: float) -> list[Worker]:
        """Switch idle workers from roles above target to roles below it. Returns the switched ones."""
        switched: list[Worker] = []
        for worker in self.workers:
            if not worker.idle(now_s):  # a retired worker is never idle: it takes no role
                continue
            surplus = self.hosting(worker.role) - self.targets.of(worker.role)
            wanting = [role for role in POOL_ROLES if self.hosting(role) < self.targets.of(role)]
            if surplus > 0 and wanting:
                worker.role = wanting[0]
                worker.capacity = self.capacity[worker.role]
                worker.available_s = now_s + self.switch_s
                self.switches += 1
                switched.append(worker)
        return switched
