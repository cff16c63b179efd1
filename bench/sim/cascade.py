"""DiffServe's cascade in the simulator: what a light stage costs, which queries the discriminator
escalates and how good each answer is, and the allocator that sets the threshold, the split and the
batch sizes (the MILP of jobs.policies.allocation; each model's latency per batch size is its latency
alone times the slowdown `reprise bench runtime --batch` measured for a batch of that size, up to
REPRISE_MAX_BATCH; without a measured table, batch size 1 only, and no size is chosen).

Which queries escalate, and the quality of each answer, replay the cascade measured on the lab's
models (`reprise cascade train --json`, bench.quality.cascade): its held-out samples (discriminator
score, light quality, heavy quality), sorted by score. A request draws one sample by a hash of its
prompt (the same prompt, the same sample, in every profile and run); it is escalated when the
sample's score is below the threshold of the moment, and its quality is the sample's light or heavy
one. So f(t) and the quality at each threshold are the measured ones. A file that holds only f(t)
(`curve`) gives escalations and the light-only / heavy-only mean qualities.

Latencies are DiffServe's published ones (4.1, per image on an A100): SD 1.5 1780 ms and SD-Turbo
100 ms (cascade 1, SLO 5 s), SDXL 6100 ms and SDXL-Lightning 550 ms (cascade 3, SLO 15 s); the
discriminator adds 10 ms (EfficientNet on an A100, 4.4).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.run.costs import StepCosts
from bench.run.options import SimulateOptions
from bench.run.profiles import Profile
from bench.run.report import BenchReport
from bench.sim.pools import Pools, PoolTargets
from bench.workload.trace import Workload
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, Allocator, Role, Route
from jobs.admission import AdmissionDecision, RouteCosts, cheaper_route
from jobs.policies.allocation import (
    AllocationPlan,
    AllocationProblem,
    Demand,
    ModelProfile,
    ewma,
    solve_allocation,
    with_backlog,
)
from jobs.policies.cascade import EscalationCurve, accepts

DISCRIMINATOR_MS = 10.0  # EfficientNet-V2 on an A100 (DiffServe 4.4)
SHIPPED_PROFILE = Path(__file__).resolve().parents[1] / "results" / "lab" / "cascade.json"


@dataclass(frozen=True, slots=True)
class CascadePair:
    """A light-heavy pair as DiffServe 4.1 publishes it."""

    name: str
    light: str
    heavy: str
    light_ms: float
    heavy_ms: float
    light_steps: int
    heavy_steps: int
    slo_s: float

    def costs(self) -> StepCosts:
        """The simulator's step costs: the heavy model's per-image latency over its steps (decode
        included); hits on the small model at the same per-step cost (SD-Turbo and SDXL-Lightning are
        distilled from UNets the size of SD 2.1's and SDXL's, 865M and 2.6B parameters)."""
        step = self.heavy_ms / self.heavy_steps
        return StepCosts(
            large_step_ms=step,
            small_step_ms=step,
            decode_ms=0.0,
            large_model=self.heavy,
            small_model=self.light,
            source=f"DiffServe 4.1: {self.heavy} {self.heavy_ms:g} ms, {self.light} {self.light_ms:g} ms "
            "per image (A100)",
        )


PAIRS: dict[str, CascadePair] = {
    "sd15": CascadePair("sd15", "sd-turbo", "sd-v1-5", 100.0, 1780.0, 1, 50, 5.0),
    "sdxl": CascadePair("sdxl", "sdxl-lightning", "sdxl", 550.0, 6100.0, 2, 50, 15.0),
}


@dataclass(frozen=True, slots=True)
class CascadeProfile:
    """The measured cascade: samples (score, light quality, heavy quality) sorted by score, f(t)."""

    samples: tuple[tuple[float, float, float], ...]
    curve: EscalationCurve
    light_quality: float | None
    heavy_quality: float | None
    source: str

    @classmethod
    def load(cls, path: Path) -> CascadeProfile:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read the cascade profile {path}: {error}") from None
        if "curve" not in data:
            raise ValueError(f"{path} holds no f(t) (`curve`): write it with `reprise cascade train --json`")
        samples = tuple(sorted(tuple(float(v) for v in row) for row in data.get("samples", [])))
        light, heavy = data.get("light_only", {}), data.get("heavy_only", {})
        return cls(
            samples=samples,  # type: ignore[arg-type]
            curve=EscalationCurve.from_json(data["curve"]),
            light_quality=light.get("quality"),
            heavy_quality=heavy.get("quality"),
            source=str(path),
        )

    def draw(self, prompt_idx: int) -> tuple[float, float | None, float | None]:
        """The request's (score, light quality, heavy quality): a sample, or a quantile of f(t)."""
        digest = hashlib.sha256(f"cascade:{prompt_idx}".encode()).digest()
        quantile = int.from_bytes(digest[:8], "big") / 2**64
        if self.samples:
            score, light, heavy = self.samples[int(quantile * len(self.samples))]
            return score, light, heavy
        # Only f(t), the scores' CDF: its inverse at this quantile (linear between grid points, so
        # that at each grid threshold t the share below t is f(t)); the qualities are the means.
        ts, fs = self.curve.thresholds, self.curve.escalated
        score = ts[-1] + 1e-6
        for i in range(1, len(ts)):
            if fs[i] > quantile:
                low = max(fs[i - 1], 0.0)
                share = (quantile - low) / (fs[i] - low) if quantile >= low else 0.0
                score = ts[i - 1] + share * (ts[i] - ts[i - 1])
                break
        return score, self.light_quality, self.heavy_quality


@dataclass(frozen=True, slots=True)
class CascadeSpec:
    """The simulated cascade: the measured profile, the pair's latencies, the controller.

    allocator diffserve: the MILP every `period_s`; modm: the threshold stays `threshold` and the
    split is the MILP's for the trace's peak demand at that threshold (DiffServe-Static, 4.1:
    "provisioned for peak")."""

    profile: CascadeProfile
    pair: CascadePair
    allocator: Allocator
    threshold: float
    period_s: float
    overprovision: float = 1.05
    discriminator_ms: float = DISCRIMINATOR_MS
    batch_slowdown: tuple[tuple[int, float], ...] = ()  # StepCosts.batch_slowdown: (n, step(n) / step(1))
    max_batch: int = 1  # the largest batch the MILP may choose (Settings.max_batch)
    cost_aware_hits: bool = True  # Settings.cascade_cost_aware_hits (jobs.admission.cheaper_route)

    @property
    def light_stage_ms(self) -> float:
        return self.pair.light_ms + self.discriminator_ms

    def model_profile(self, name: str, latency_s: float) -> ModelProfile:
        """A model's latency per batch size for the MILP (DiffServe 3.3: "profiled across different
        batch sizes"): one query's latency times the measured slowdown of a batch of b (the runtime
        bench's table, sizes up to max_batch); batch 1 only without a table."""
        sizes = {n: x for n, x in self.batch_slowdown if n <= self.max_batch} or {1: 1.0}
        return ModelProfile(name, {n: latency_s * x for n, x in sizes.items()})

    def escalates(self, score: float, threshold: float) -> bool:
        return not accepts(score, threshold)


@dataclass(slots=True)
class CascadeController:
    """The simulator's run of DiffServe's controller: demand per period, Little's law on the queues,
    the MILP, and the timeline of its decisions."""

    spec: CascadeSpec
    workers: int
    threshold: float
    estimate: dict[str, float | None] = field(default_factory=lambda: {"misses": None, "light": None})
    timeline: list[dict[str, float | bool]] = field(default_factory=list)
    plans: list[AllocationPlan] = field(default_factory=list)
    costlier_hits: int = 0  # hits served as misses: their resume cost more than the miss route

    def kept_hit(self, k: int | None, profile: Profile, costs: StepCosts) -> int | None:
        """A hit's k when admission's cost-aware routing keeps it (jobs.admission.cheaper_route, as the
        service runs it), priced on the pool that serves hits and on the costs the controller plans
        with: a light stage, the heavy run, f(t) of its newest plan; None when it goes light-first."""
        if k is None or not self.spec.cost_aware_hits or not self.plans:
            return k
        step_ms = costs.small_step_ms if profile.hits_on_small else costs.large_step_ms
        prices = RouteCosts(
            hit_step_s=step_ms / 1e3,
            light_stage_s=self.spec.light_stage_ms / 1e3,
            heavy_s=self.spec.pair.heavy_ms / 1e3,
            escalated=self.plans[-1].escalated,
        )
        hit = AdmissionDecision(AdmissionOutcome.HIT, Route.HIT, k=k)
        if cheaper_route(hit, prices, steps=profile.steps).route is Route.HIT:
            return k
        self.costlier_hits += 1
        return None

    def problem(
        self,
        misses_rps: float,
        light_work_s: float,
        queued: tuple[int, int],
        *,
        curve: EscalationCurve | None = None,
    ) -> AllocationProblem:
        """The MILP for a demand of `misses_rps` cascade queries and `light_work_s` light-pool seconds
        per second (light stages and hits on the small model), with `queued` (light, heavy) waiting."""
        spec = self.spec
        light_s, heavy_s = spec.light_stage_ms / 1e3, spec.pair.heavy_ms / 1e3
        light_rps = light_work_s / light_s
        demand = Demand(
            cascade_rps=misses_rps,
            light_rps=light_rps,
            light_wait_s=queued[0] / light_rps if light_rps > 0 else 0.0,
            heavy_wait_s=queued[1] / misses_rps if misses_rps > 0 else 0.0,
        )
        return AllocationProblem(
            light=spec.model_profile(spec.pair.light, light_s),
            heavy=spec.model_profile(spec.pair.heavy, heavy_s),
            demand=with_backlog(
                demand, light_queued=queued[0], heavy_queued=queued[1], drain_s=spec.period_s
            ),
            curve=curve or spec.profile.curve,
            workers=self.workers,
            slo_s=spec.pair.slo_s,
            overprovision=spec.overprovision,
        )

    def decide(
        self, now_s: float, misses_rps: float, light_work_s: float, queued: tuple[int, int]
    ) -> AllocationPlan:
        """One period: the EWMA demand (DiffServe 3.3), the MILP, the new threshold."""
        self.estimate["misses"] = ewma(self.estimate["misses"], misses_rps)
        self.estimate["light"] = ewma(self.estimate["light"], light_work_s)
        assert self.estimate["misses"] is not None and self.estimate["light"] is not None
        plan = solve_allocation(self.problem(self.estimate["misses"], self.estimate["light"], queued))
        self.threshold = plan.threshold
        self.record(now_s, plan)
        return plan

    def record(self, now_s: float, plan: AllocationPlan) -> None:
        self.plans.append(plan)
        self.timeline.append(
            {
                "t": round(now_s, 3),
                "threshold": plan.threshold,
                "light": plan.light_workers,
                "heavy": plan.heavy_workers,
                "light_batch": plan.light_batch,
                "heavy_batch": plan.heavy_batch,
                "escalated": round(plan.escalated, 4),  # f(threshold)
                "feasible": plan.feasible,
                "solve_ms": round(plan.solve_ms, 3),
            }
        )


def static_plan(
    controller: CascadeController, peak_misses_rps: float, peak_light_work_s: float
) -> AllocationPlan:
    """DiffServe-Static: the fixed threshold, and the split the MILP gives it at the peak demand."""
    fixed = controller.threshold
    curve = controller.spec.profile.curve
    only = EscalationCurve((fixed,), (curve.at(fixed),), f"fixed threshold {fixed:g}")
    return solve_allocation(controller.problem(peak_misses_rps, peak_light_work_s, (0, 0), curve=only))


def start_controller(spec: CascadeSpec, workload: Workload, pools: Pools) -> CascadeController:
    """The cascade's controller, its first decision applied to `pools`: the split for the trace's peak
    arrival rate under the fixed threshold (modm), or the MILP's for the first period (diffserve).
    Both count every arrival as a miss: the cache's hit rate is not known before the run."""
    workers = pools.targets.large + pools.targets.small
    controller = CascadeController(spec, workers=workers, threshold=spec.threshold)
    times = [r.arrival_s for r in workload.requests if r.arrival_s is not None]
    counts = Counter(int(t // spec.period_s) for t in times)
    peak = max(counts.values()) / spec.period_s if counts else 1.0
    first = counts.get(0, 0) / spec.period_s if counts else 1.0
    if spec.allocator is Allocator.DIFFSERVE:
        plan = controller.decide(0.0, first, first * spec.light_stage_ms / 1e3, (0, 0))
    else:
        plan = static_plan(controller, peak, peak * spec.light_stage_ms / 1e3)
        controller.record(0.0, plan)
    pools.set_targets(PoolTargets(large=plan.heavy_workers, small=plan.light_workers))
    apply_batches(pools, plan)
    return controller


def apply_batches(pools: Pools, plan: AllocationPlan) -> None:
    """The MILP's batch sizes: the jobs a light (small) and a heavy (large) worker run at once."""
    pools.set_capacity(Role.SMALL, plan.light_batch)
    pools.set_capacity(Role.LARGE, plan.heavy_batch)


def cascade_summary(
    report: BenchReport, controller: CascadeController | None, stages: Counter[str]
) -> BenchReport:
    """The run's escalation rate and the controller's decisions, on its report."""
    assert controller is not None
    light = stages["light"]
    return replace(
        report,
        escalation_rate=stages["escalated"] / light if light else None,
        threshold_timeline=tuple(controller.timeline),
        costlier_hits=controller.costlier_hits,
    )


def escalate(controller: CascadeController, score: float, stages: Counter[str]) -> bool:
    """At the end of a light stage: whether the discriminator's `score` sends it on, counted."""
    stages["light"] += 1
    escalated = controller.spec.escalates(score, controller.threshold)
    stages["escalated"] += escalated
    return escalated


def cascade_quality(
    stage: str | None, draw: tuple[float, float | None, float | None] | None
) -> tuple[float | None, float | None]:
    """A cascade job's (quality, fresh quality): its sample's light or heavy one, and the heavy one;
    (None, None) for a job outside the cascade (bench.quality.model predicts it)."""
    if draw is None:
        return None, None
    _, light, heavy = draw
    return (heavy if stage == "heavy" else light), heavy


def cascade_spec(
    *,
    allocator: Allocator,
    pair: str,
    profile: Path | None,
    threshold: float,
    period_s: float,
    overprovision: float,
    cost_aware_hits: bool = True,
) -> CascadeSpec:
    """The simulated cascade the options name; ValueError names an unknown pair or a missing profile."""
    if pair not in PAIRS:
        raise ValueError(f"unknown --cascade-pair {pair!r}: choose {', '.join(PAIRS)}")
    path = profile if profile is not None else SHIPPED_PROFILE
    if not path.is_file():
        raise ValueError(
            f"no cascade profile at {path}: write one with `reprise cascade train --json {path}`"
        )
    return CascadeSpec(
        profile=CascadeProfile.load(path),
        pair=PAIRS[pair],
        allocator=allocator,
        threshold=threshold,
        period_s=period_s,
        overprovision=overprovision,
        cost_aware_hits=cost_aware_hits,
    )


CASCADE_PROFILES = ("diffserve", "reprise")


def cascade_for(settings: Settings, options: SimulateOptions) -> CascadeSpec | None:
    """The cascade a `bench simulate` run simulates, when one of its profiles has one; None otherwise."""
    if not any(name in CASCADE_PROFILES for name in options.profiles):
        return None
    if options.autoscale:
        raise ValueError("--autoscale sizes a fleet the pool monitor splits; DiffServe's MILP sizes its own")
    return cascade_spec(
        allocator=options.allocator,
        pair=options.cascade_pair,
        profile=options.cascade_profile,
        threshold=settings.cascade_threshold,
        period_s=float(options.monitor_period_s or settings.monitor_period_s),
        overprovision=settings.cascade_overprovision,
        cost_aware_hits=settings.cascade_cost_aware_hits,
    )
