"""KEDA's queue-depth autoscaling in the simulator, beside the pool monitor: the autoscaler sets how many
GPU workers there are (the fleet), MoDM's monitor how they split between the large and the small model
(docs/kubernetes.md, "what scales on what"). The defaults are the ScaledObjects' of
deploy/kubernetes/autoscaling/scaled-objects.yaml and Kubernetes' own:

- every `polling_s` (KEDA's pollingInterval there, 15 s) the desired fleet is the jobs waiting or
  running over `jobs_per_worker` (the ScaledObjects' target: the jobs a pod denoises at once, its
  REPRISE_MAX_BATCH; the simulation sets it to its workers' batch capacity), rounded up, within
  [min_workers, max_workers] (minReplicaCount 1 and maxReplicaCount 8 a role);
- a larger fleet is asked at once, and a new worker serves after `start_s` (a GPU pod's scheduling,
  image start and model load: 60 s, a guess of the order docs/kubernetes.md gives, not a measurement);
- a smaller one only once every desired value of the last `stabilization_s` was smaller (the HPA's
  scale-down stabilization window, 300 s by default), and only idle workers leave (the scale-in
  protection that keeps running jobs alive).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.sim.monitor import AllocationPoint
from bench.sim.pools import Pools
from core.vocabulary import Role


@dataclass(frozen=True, slots=True)
class AutoscalerSpec:
    min_workers: int = 2
    max_workers: int = 16
    jobs_per_worker: float = 1.0
    polling_s: float = 15.0
    start_s: float = 60.0
    stabilization_s: float = 300.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(f"need 1 <= min <= max workers, not {self.min_workers}:{self.max_workers}")
        if self.jobs_per_worker <= 0 or self.polling_s <= 0 or self.start_s < 0 or self.stabilization_s < 0:
            raise ValueError("jobs per worker and polling must be positive, the delays not negative")

    @classmethod
    def parse(cls, text: str) -> AutoscalerSpec:
        """`MIN:MAX` (the other fields at their defaults)."""
        try:
            low, high = (int(part) for part in text.split(":"))
        except ValueError:
            raise ValueError(f"--autoscale takes MIN:MAX workers, e.g. 2:16, not {text!r}") from None
        return cls(min_workers=low, max_workers=high)


@dataclass(slots=True)
class Autoscaler:
    """The fleet size over a run: `decide` once a polling interval with the jobs in the system."""

    spec: AutoscalerSpec
    recent: deque[tuple[float, int]] = field(default_factory=deque)  # (time, desired) within the window

    def desired(self, jobs: int) -> int:
        wanted = math.ceil(jobs / self.spec.jobs_per_worker)
        return min(self.spec.max_workers, max(self.spec.min_workers, wanted))

    def decide(self, now_s: float, jobs: int, fleet: int) -> int:
        """The fleet from now: larger at once; smaller only to the largest desired value of the window."""
        wanted = self.desired(jobs)
        self.recent.append((now_s, wanted))
        while self.recent and self.recent[0][0] < now_s - self.spec.stabilization_s:
            self.recent.popleft()
        if wanted >= fleet:
            return wanted
        return min(fleet, max(value for _, value in self.recent))

    def poll(self, now_s: float, jobs: int, pools: Pools, *, grow: Role) -> bool:
        """One poll with `jobs` waiting or running: resize `pools` (new workers host `grow`); True when
        the fleet changed."""
        fleet = self.decide(now_s, jobs, pools.fleet)
        if fleet == pools.fleet:
            return False
        pools.resize(fleet, now_s, start_s=self.spec.start_s, grow=grow)
        return True


def fleet_summary(timeline: Sequence[AllocationPoint], end_s: float) -> tuple[float, int, int]:
    """The fleet over a run from its allocation timeline: (time-weighted mean, smallest, largest)."""
    if not timeline:
        return 0.0, 0, 0
    sizes = [point.large + point.small for point in timeline]
    starts = [point.t for point in timeline]
    spans = [
        max(0.0, end - start)
        for start, end in zip(starts, [*starts[1:], max(end_s, starts[-1])], strict=True)
    ]
    total = sum(spans)
    mean = (
        sum(size * span for size, span in zip(sizes, spans, strict=True)) / total
        if total
        else float(sizes[0])
    )
    return mean, min(sizes), max(sizes)
