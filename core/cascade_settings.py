"""The settings of DiffServe's cascade and allocator (issue 14), a part of core.settings.Settings.

Kept apart so that each settings module stays readable; Settings inherits these fields, read from the
same REPRISE_* environment variables.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import Allocator


class CascadeSettings(BaseSettings):
    """REPRISE_ALLOCATOR and the cascade's REPRISE_CASCADE_* variables."""

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
    cascade_overprovision: float = Field(
        1.05,
        ge=1.0,
        description="lambda, the MILP's over-provisioning of the estimated demand (DiffServe 3.3: 1.05).",
    )
