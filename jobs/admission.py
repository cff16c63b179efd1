"""Admission: from what the predictor said and what the lookup found, to a route and a k. Pure.

The one decision: the admit worker (workers.admission) and the simulator (bench.sim.cache) both call
`decide`, so a simulation routes and scales k as the service does. (`cache_applies` holds for every
simulated request: each runs the configured T with the cache on.) Under DiffServe's cascade both
then weigh a hit's cost against the miss route's (`cheaper_route`, from measured costs)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from core.vocabulary import AdmissionOutcome, HitPolicy, Route
from jobs.policies.k_selection import ThresholdTable, choose_k, largest_stored_at_most


@dataclass(frozen=True, slots=True)
class Candidate:
    """The nearest cached entry the lookup found."""

    entry_id: uuid.UUID
    similarity: float
    stored_ks: tuple[int, ...]  # intermediate latents still stored (NIRVANA); holes are absent
    has_final_latent: bool  # MoDM refines the final latent


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    outcome: AdmissionOutcome
    route: Route
    k: int | None = None
    similarity: float | None = None
    source_entry_id: uuid.UUID | None = None


MISS_UNSEARCHED = AdmissionDecision(AdmissionOutcome.PREDICTED_MISS, Route.MISS)

# The threshold tables were profiled on T = 50 step runs (NIRVANA 6, MoDM 6).
PROFILED_STEPS = 50


def scale_k(k: int, steps: int) -> int | None:
    """A profiled k (of 50 steps) for a run of `steps`: the same fraction of the schedule skipped,
    leaving at least one step to run. None when the run is too short to skip anything."""
    if steps < 2:
        return None
    return min(max(1, round(k * steps / PROFILED_STEPS)), steps - 1)


def cache_applies(*, cache_mode: str, hit_policy: HitPolicy, steps: int, capture_steps_t: int) -> bool:
    """Whether a request can use the cache at all.

    NIRVANA's intermediate latents belong to one schedule: they resume only a run of the same T
    (the T the captures were made for). MoDM's final latents can be noised to any step of any T.
    """
    if cache_mode == "off":
        return False
    return hit_policy is HitPolicy.REFINE or steps == capture_steps_t


def decide(
    *,
    candidate: Candidate | None,
    table: ThresholdTable,
    knob: int,
    hit_policy: HitPolicy,
    steps: int,
) -> AdmissionDecision:
    """Route a searched request: a hit with k when the candidate is similar enough and still holds
    a usable state (NIRVANA Algorithm 1 / 5.3.1, holes per 5.4), otherwise a searched miss."""
    if candidate is None:
        return AdmissionDecision(AdmissionOutcome.SEARCHED_MISS, Route.MISS)
    profiled = choose_k(candidate.similarity, table, None, knob)
    k = scale_k(profiled, steps) if profiled is not None else None
    if k is not None and hit_policy is HitPolicy.RESUME:
        # States are only captured on runs of the configured T, and only such runs come here
        # (cache_applies), so the stored ks and k count steps of the same schedule.
        k = largest_stored_at_most(k, candidate.stored_ks)
    elif not candidate.has_final_latent:
        k = None
    if k is None:
        return AdmissionDecision(AdmissionOutcome.SEARCHED_MISS, Route.MISS, similarity=candidate.similarity)
    return AdmissionDecision(
        AdmissionOutcome.HIT,
        Route.HIT,
        k=k,
        similarity=candidate.similarity,
        source_entry_id=candidate.entry_id,
    )


@dataclass(frozen=True, slots=True)
class RouteCosts:
    """What the two routes of a request that found a usable entry cost, in seconds of one worker, as
    DiffServe's allocator last measured them (per-model latencies at batch size 1, DiffServe 3.3):

    hit_step_s: one denoising step on the pool that serves hits (a hit runs steps - k of them);
    light_stage_s: a miss's light stage, the light model's generation and the discriminator (3.1);
    heavy_s: a full run of the heavy model, which an escalated miss adds;
    escalated: the share of light stages the discriminator escalates at the threshold in force, f(t).
    """

    hit_step_s: float
    light_stage_s: float
    heavy_s: float
    escalated: float

    def hit_s(self, steps: int, k: int) -> float:
        return (steps - k) * self.hit_step_s

    def miss_s(self) -> float:
        """A miss through the cascade: its light stage, and the heavy run of the f(t) escalated."""
        return self.light_stage_s + self.escalated * self.heavy_s


def cheaper_route(decision: AdmissionDecision, costs: RouteCosts | None, *, steps: int) -> AdmissionDecision:
    """Cost-aware routing of a hit under DiffServe's cascade: the hit stands unless resuming it from
    k costs more worker time than the miss route's expected cost (a light stage, and a heavy run at
    the escalation rate in force); then the request goes light-first as a miss (`COSTLIER_HIT`).

    Both routes are within the quality target by their own control: the hit by the k table (NIRVANA,
    or the quality guard's table), the cascade by the threshold DiffServe's MILP sets for the load.
    What differs is the GPU time: under load the MILP lowers the threshold, a light stage rarely
    escalates, and a hit resumed for 25 steps costs several light stages (DiffServe 4.1: SD-Turbo
    100 ms against SD 1.5's 1780 ms for 50 steps). `costs` None (no cascade, or nothing measured
    yet): the hit stands."""
    if costs is None or decision.route is not Route.HIT or decision.k is None:
        return decision
    if costs.hit_s(steps, decision.k) <= costs.miss_s():
        return decision
    return AdmissionDecision(AdmissionOutcome.COSTLIER_HIT, Route.MISS, similarity=decision.similarity)
