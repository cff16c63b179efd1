"""What the runtime's operations return. Plain dataclasses: the job layer stores and reports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt
from PIL import Image

from core.vocabulary import Role

Latent = npt.NDArray[Any]
"""One latent as a (C, H/8, W/8) numpy array in the model's compute dtype (float32 on a CPU,
float16 on CUDA): the latent the UNet works on, i.e. the VAE encoder's output already multiplied
by the VAE's scaling factor. Kept in that dtype so that resume is exact; `db.codec.latent.encode_latent`
takes it as is."""


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """The outcome of generate, resume or refine.

    image: the decoded final latent when the call asked for it (decode=True), else None: LatentBox
    stores the latent and decodes on read (4.1). final_latent: the latent after the last step.
    captured: step k -> latent after k scheduler steps (the input of step k+1); generate only.
    start_step: the step the run began at (0 for generate, k for resume and refine).
    denoiser_evals: model name -> UNet evaluations run; a classifier-free-guidance batch
    (unconditional + conditional in one forward pass) counts as one evaluation.
    step_ms: wall time of each denoising step, in order. wall_s: the whole call. shared_s: of wall_s,
    the time its steps spent on other jobs' samples (a step-level batch, by UNet rows), so that
    `service_s` is the worker's time this job took, the figure pool controllers size pools with.
    vae_decodes: VAE decoder passes the call ran (the final image when asked for; refine of another
    family's latent also decodes the source with that family's VAE).
    """

    image: Image.Image | None
    final_latent: Latent
    captured: dict[int, Latent]
    family: str
    model: str
    role: Role
    steps: int
    start_step: int
    denoiser_evals: dict[str, int]
    step_ms: tuple[float, ...]
    wall_s: float
    vae_decodes: int = 0
    shared_s: float = 0.0

    @property
    def steps_run(self) -> int:
        return self.steps - self.start_step

    @property
    def service_s(self) -> float:
        """The worker's time this job took: its wall time less its batch partners' part of its steps."""
        return self.wall_s - self.shared_s


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """The outcome of decode: the image of a stored latent. A VAE decode runs no denoiser."""

    image: Image.Image
    family: str
    wall_s: float
    denoiser_evals: dict[str, int] = field(default_factory=dict)
