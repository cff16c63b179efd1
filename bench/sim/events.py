"""The simulation's events and the state of one request in it (bench.sim.simulate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from bench.run.outcomes import RequestOutcome
from bench.sim.cascade import cascade_quality
from bench.workload.trace import Request
from core.vocabulary import Role


class Event(IntEnum):
    """Event kinds; at equal times the smaller runs first (a finished job frees its worker and
    inserts its entry before anything else happens at that instant)."""

    DONE = 0
    WAKE = 1
    MAINTAIN = 2
    MONITOR = 3
    ARRIVAL = 4
    READY = 5
    AUTOSCALE = 6  # bench.sim.autoscale: the fleet's size, each polling interval


@dataclass(slots=True)
class SimJob:
    """One request in the simulation, from admission to completion: its hit (k, entry, similarity), the
    pool it waits for, the evaluations it ran, and its cascade stage and sampled quality."""

    request: Request
    arrival_s: float
    k: int | None
    admission_ms: float | None
    entry_row: int | None = None  # the cached entry a hit was admitted to
    similarity: float | None = None  # a hit's similarity to that entry (its quality depends on it)
    role: Role = Role.LARGE
    evals: dict[str, int] = field(default_factory=dict)
    stage: str | None = None  # DiffServe's cascade: "light", then "heavy" when escalated
    draw: tuple[float, float | None, float | None] | None = None  # (score, light, heavy quality)

    def outcome(self, now: float, steps: int) -> RequestOutcome:
        """The job's outcome, completed at `now` out of `steps` steps: a hit with its k and similarity, a
        cascade job with its sample's qualities (bench.quality.model predicts the others')."""
        hit = self.k is not None
        quality, fresh_quality = cascade_quality(self.stage, self.draw)
        return RequestOutcome(
            seq=self.request.seq,
            prompt_idx=self.request.prompt_idx,
            status="succeeded",
            hit=hit,
            k=self.k,
            steps=steps,
            denoiser_evaluations=self.evals,
            arrival_s=self.arrival_s,
            completed_s=now,
            latency_ms=(now - self.arrival_s) * 1000.0,
            admission_ms=self.admission_ms,
            similarity=self.similarity if hit else None,
            quality=quality,
            fresh_quality=fresh_quality,
        )
