"""Admission: from what the predictor said and what the lookup found, to a route and a k. Pure.

The one decision: the admit worker (workers.admission) and the simulator (bench.sim.cache) both call
`decide`, so a simulation routes and scales k as the service does. (`cache_applies` holds for every
simulated request: each runs the configured T with the cache on.)"""

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
