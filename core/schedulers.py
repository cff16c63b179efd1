"""Denoising schedulers by name (REPRISE_SCHEDULER), the diffusers class each names, and which of them
can resume a run exactly from a cached intermediate latent.

NIRVANA's hits resume the cached latent at step k and run steps k+1..T (NIRVANA 4.1); that reproduces
the uninterrupted run only for a scheduler whose step t depends on nothing but (latent, t): DDIM with
eta = 0 (NIRVANA 6 samples with DDIM) and Euler. Multistep and history-keeping solvers (PNDM, Stable
Diffusion 1.5's own default; DPM-Solver++ multistep; LMS) restart their history at k, and ancestral
samplers draw noise from a generator that a resume cannot replay, so their resumes drift: they are
refused under REPRISE_HIT_POLICY=resume (jobs/configuration.py). Under refine (MoDM) any first-order
scheduler runs, since a refine starts from fresh noise at step k by design.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class SchedulerName(StrEnum):
    PIPELINE = "pipeline"  # the model's own scheduler (its scheduler_config.json)
    DDIM = "ddim"  # NIRVANA 6: DDIM, N = 50
    EULER = "euler"
    EULER_ANCESTRAL = "euler-a"
    DPM_PP = "dpm++"  # DPM-Solver++ (2M), multistep
    PNDM = "pndm"  # Stable Diffusion 1.5's default
    LMS = "lms"


DIFFUSERS_CLASS: Mapping[SchedulerName, str | None] = MappingProxyType(
    {
        SchedulerName.PIPELINE: None,
        SchedulerName.DDIM: "DDIMScheduler",
        SchedulerName.EULER: "EulerDiscreteScheduler",
        SchedulerName.EULER_ANCESTRAL: "EulerAncestralDiscreteScheduler",
        SchedulerName.DPM_PP: "DPMSolverMultistepScheduler",
        SchedulerName.PNDM: "PNDMScheduler",
        SchedulerName.LMS: "LMSDiscreteScheduler",
    }
)

RESUMES_EXACTLY = frozenset({"DDIMScheduler", "EulerDiscreteScheduler"})
"""Diffusers classes whose resume from step k equals the uninterrupted run (tested bit for bit in
tests/workers/test_diffusion_runtime.py)."""

WHY_NOT_EXACT: Mapping[str, str] = MappingProxyType(
    {
        "PNDMScheduler": "PNDM (PLMS) keeps the last four model outputs, which a resume at k does not have",
        "DPMSolverMultistepScheduler": "DPM-Solver++ multistep reuses the previous step's model output",
        "LMSDiscreteScheduler": "LMS keeps a history of derivatives",
        "EulerAncestralDiscreteScheduler": "ancestral sampling draws fresh noise each step from a generator "
        "a resume cannot replay",
    }
)


def resume_refusal(class_name: str) -> str | None:
    """Why a scheduler class cannot serve NIRVANA's resume, or None when it resumes exactly."""
    if class_name in RESUMES_EXACTLY:
        return None
    reason = WHY_NOT_EXACT.get(class_name, "it is not known to resume exactly")
    return (
        f"{class_name} cannot resume a cached latent exactly ({reason}), and resuming exactly is what "
        "NIRVANA's hits rely on: set REPRISE_SCHEDULER=ddim (NIRVANA 6) or euler, or "
        "REPRISE_HIT_POLICY=refine"
    )


# Stable Diffusion 1.x's noise schedule (its scheduler_config.json), with DDIM as in NIRVANA 6: the
# schedule of the tiny models (workers.runtime.tiny) and of the quality lab's (lab.models).
SD1_SCHEDULER_CONFIG: Mapping[str, object] = MappingProxyType(
    {
        "num_train_timesteps": 1000,
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "clip_sample": False,
        "set_alpha_to_one": False,
        "steps_offset": 1,
        "prediction_type": "epsilon",
        "timestep_spacing": "leading",
    }
)
