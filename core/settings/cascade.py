"""Cascade: DiffServe's query-aware cascade (a light model first, a discriminator decides whether its
image is kept) and the allocator that owns the GPU pools, MoDM's monitor or DiffServe's MILP."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import Allocator


class CascadeSettings(BaseSettings):
    """Cascade (DiffServe): the allocator, the discriminator's threshold, the light stage and the MILP.

    Under the diffserve allocator a miss runs on the light (small) model first and a discriminator
    scores its image; a confident image is kept, the others go on to the heavy (large) model.
    """

    allocator: Allocator = Field(
        Allocator.MODM,
        description="Who owns the pools: modm (MoDM 5.3's PID monitor; misses run on the large model) or "
        "diffserve (DiffServe: misses go light-first through the discriminator, a MILP sets the threshold "
        "and the workers per model every monitor period).",
    )
    cascade_threshold: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The discriminator confidence a light image needs to be kept, until the allocator "
        "decides one (and always when the monitor is off: a fixed-threshold cascade). 0.5: the "
        "discriminator's own boundary between real and generated (DiffServe 3.2, a softmax over the two).",
    )
    cascade_light_steps: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Denoising steps of the light stage. Unset: the request's own. DiffServe's light models "
        "are few-step (4.1: SD-Turbo 1 step, SDXL-Lightning 2); the same model at fewer steps is a light "
        "variant too (2.1). On the lab: REPRISE_SMALL_MODEL=lab:large with 4 steps (README).",
    )
    cascade_slo_s: float | None = Field(
        None,
        gt=0,
        description="The latency SLO L of the allocation MILP, seconds. Unset: 2.8x the heavy model's "
        "measured latency (DiffServe 4.1: a 5 s SLO for SD 1.5 at 1.78 s per image).",
    )
    cascade_cost_aware_hits: bool = Field(
        True,
        description="Under the diffserve allocator, serve a hit as a miss (light-first) when resuming it "
        "from k costs more worker time than a light stage plus the heavy run of the share f(t) the "
        "discriminator escalates at the threshold in force, both from the allocator's newest measured "
        "latencies (jobs.admission.cheaper_route). On by measurement: in the simulated load sweep a hit "
        "resumed 25 steps costs several light stages once the MILP lowers the threshold "
        "(docs/results/simulator.md). Off: every hit the table grants is served as a hit.",
    )
    cascade_overprovision: float = Field(
        1.05,
        ge=1.0,
        description="lambda, the MILP's over-provisioning of the estimated demand (DiffServe 3.3: 1.05).",
    )
