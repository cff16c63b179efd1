"""A simulated deployment (SimConfig) and what one simulation gives back (SimResult): bench.sim.simulate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.live.stack import ScheduledAllocation
from bench.run.costs import StepCosts
from bench.run.outcomes import RequestOutcome
from bench.run.profiles import Profile
from bench.run.report import BenchReport
from bench.sim.autoscale import AutoscalerSpec
from bench.sim.cache import CacheCounters
from bench.sim.cascade import CascadeSpec
from bench.sim.monitor import AllocationPoint, MonitorSpec
from bench.sim.platform import PlatformCharge
from bench.sim.pools import PoolTargets

DEFAULT_LARGE_WORKERS = 3
DEFAULT_SMALL_WORKERS = 1
"""MoDM 6 serves on a 4-GPU server (4x A40); 3 large + 1 small is a starting split its global
monitor would move (Algorithm 1). Profiles without a small model put all 4 on the large model."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One simulated deployment. `cache_bytes` is the budget of the single scope simulated;
    `maintenance_period_s` the beat period (Settings.beat_period_s); `k_table` overrides the table."""

    profile: Profile
    costs: StepCosts
    cache_bytes: int
    large_workers: int = DEFAULT_LARGE_WORKERS
    small_workers: int = DEFAULT_SMALL_WORKERS
    maintenance_period_s: float = 30.0
    switch_s: float = 0.0
    k_table: str | None = None
    large_serves_hits: bool = True  # Settings.large_serves_hits; forced on while no worker hosts small
    monitor: MonitorSpec | None = None  # MoDM's global monitor (bench.sim.monitor); None: a fixed allocation
    allocation_schedule: tuple[ScheduledAllocation, ...] = ()  # a replayed stack's moves (bench.live.stack)
    quality_profile: Path | None = None  # `reprise profile k --json`; None: the lab's shipped profiles
    quality_from: Path | None = None  # a replay's JSON: its drops refit the profile (bench.quality.model)
    cascade: CascadeSpec | None = None  # DiffServe's cascade for misses (bench.sim.cascade)
    slo_s: float | None = None  # an SLO to report violations of beside x2 and x4 (a DiffServe pair's)
    max_batch: int = 1  # jobs a worker denoises together (Settings.max_batch), with costs.batch_slowdown
    autoscaler: AutoscalerSpec | None = None  # KEDA's fleet size (bench.sim.autoscale); None: a fixed fleet
    cohost: bool = False  # Settings.cohost: small workers run misses on the large model when no hit waits
    platform: PlatformCharge | None = None  # each job's platform cost on its worker (bench.sim.platform)

    @property
    def cohosting(self) -> bool:
        """Whether small workers take misses (Settings.cohosting: batching, MoDM's allocator)."""
        return self.cohost and self.batch_capacity > 1 and self.cascade is None

    @property
    def batch_capacity(self) -> int:
        """Jobs a simulated worker runs at once: max_batch where the costs measured how a batch's step
        slows down (`reprise bench runtime --batch`), else one (an unmeasured batch would be free)."""
        return self.max_batch if self.costs.batch_slowdown else 1

    def targets(self, large: int | None = None, small: int | None = None) -> PoolTargets:
        """Worker counts (at start: the configured ones): every GPU on the large model unless hits go
        to the small one."""
        large = self.large_workers if large is None else large
        small = self.small_workers if small is None else small
        if (self.profile.caches and self.profile.hits_on_small) or self.cascade is not None:
            return PoolTargets(large=large, small=small)
        return PoolTargets(large=large + small, small=0)


@dataclass(frozen=True, slots=True)
class SimResult:
    report: BenchReport
    outcomes: tuple[RequestOutcome, ...]
    prices: dict[str, float]
    counters: CacheCounters | None
    table: str | None
    allocation_timeline: tuple[AllocationPoint, ...] | None = None  # with a pool monitor: each decision
    device_ms_per_job: float | None = None  # the workers' time on model calls over the jobs run


ConfigFor = Callable[[Profile, int], SimConfig]
"""The deployment every run of a simulation simulates, for a profile and a cache budget."""
