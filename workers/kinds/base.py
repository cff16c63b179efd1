"""The interface every kind of job implements (workers.kinds): how admission decides it, how a miss
generates it with capture, how a hit resumes it, and how its stored latent decodes for a read. How each
run stores its result and fills the cache is the kind's own, behind `generate` and `reuse`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from db.codec.latent import DecodedLatent
from jobs.admission import AdmissionDecision
from jobs.policies.video_hits import HitKind
from workers.context import WorkerContext
from workers.job import JobView
from workers.lease import LeaseKeeper


@dataclass(frozen=True, slots=True)
class Admitted:
    """A kind's admission decision: the route and k (decision), whether the match predictor said hit
    (None when it did not run), and for a video hit its kind and, decoupled, the background's entry
    (decision.source_entry_id is then the object's: FlexCache 4.2.2)."""

    decision: AdmissionDecision
    predicted_hit: bool | None = None
    video_hit: HitKind | None = None
    background_entry_id: uuid.UUID | None = None


class StageTimer:
    """Milliseconds per admission stage (embed, predict, lookup), and the total."""

    def __init__(self) -> None:
        self.started = self.mark = time.perf_counter()
        self.stages: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = round((now - self.mark) * 1e3, 3)
        self.mark = now

    def finish(self) -> dict[str, float]:
        return {**self.stages, "total": round((time.perf_counter() - self.started) * 1e3, 3)}


class Kind(Protocol):
    """One kind of job. `generate` and `reuse` run under the job's claim and lease (workers.generation)
    and end the job: completed (its final latent stored, the cache filled unless the request turned it
    off, every counted effect once), canceled, failed on invalid input, or, for a hit whose source is
    gone or does not fit, rerouted as a miss."""

    cascades: bool
    """Whether DiffServe's light model can serve its miss first (workers.cascade)."""

    def admit(self, context: WorkerContext, job: JobView, timer: StageTimer) -> Admitted:
        """Admission's lookup and decision for a job not yet routed, timing its stages on `timer`."""
        ...

    def generate(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        """A miss: all T steps from seeded noise, capturing the states the cache keeps."""
        ...

    def reuse(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        """A hit: T - k steps from the cached source admission chose."""
        ...

    def decode(self, context: WorkerContext, latent: DecodedLatent, fmt: str) -> bytes:
        """A stored final latent as the bytes of a read in `fmt` (LatentBox 4.1: decode on read)."""
        ...
