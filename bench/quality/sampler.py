"""Batched sampling for the quality benchmarks: the runtime's denoising, many prompts at once.

The service runs one job per call (workers.runtime.DiffusionRuntime); profiling needs thousands of
generations, so this runs the same steps on a batch: the pipeline's encode_prompt, the runtime's
scheduler template and step arguments (DDIM, eta 0), its seeded noise per prompt, and classifier-
free guidance batched as the runtime batches it. A prompt's latents equal the runtime's for the
same prompt and seed (tested), up to float rounding of batched kernels.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from core.params import VAE_SCALE_FACTOR, GenerationParams
from core.schedulers import DIFFUSERS_CLASS, SchedulerName
from workers.runtime.denoising import new_scheduler, scheduler_template, seeded_noise, step_kwargs
from workers.runtime.latents import vae_decode
from workers.runtime.loading import load_pipeline

CPU = torch.device("cpu")
Images = list[npt.NDArray[np.uint8]]


@dataclass(slots=True)
class Batch:
    """Final latents of a batch (n, C, h, w) and the captured ones by step."""

    latents: torch.Tensor
    captured: dict[int, torch.Tensor]


class Sampler:
    """One pipeline, loaded once, sampling batches on the CPU in float32."""

    def __init__(self, source: str, *, steps: int, guidance: float, size: int = 64) -> None:
        self.pipe: Any = load_pipeline(source, device=CPU, dtype=torch.float32)
        self._template = scheduler_template(self.pipe.scheduler, DIFFUSERS_CLASS[SchedulerName.DDIM])
        self.steps, self.guidance, self.size = steps, guidance, size

    def generate(self, prompts: Sequence[str], seeds: Sequence[int], capture: Collection[int] = ()) -> Batch:
        """Full generations from seeded noise, capturing the latent after each step in `capture`."""
        noise = torch.cat([self._noise(prompt, seed) for prompt, seed in zip(prompts, seeds, strict=True)])
        scheduler = new_scheduler(self._template, self.steps, start_step=0, device=CPU)
        return self._denoise(prompts, noise * scheduler.init_noise_sigma, scheduler, 0, set(capture))

    def resume(self, prompts: Sequence[str], latents: torch.Tensor, k: int) -> Batch:
        """NIRVANA's hit: continue cached latents captured after step k, for the remaining steps."""
        scheduler = new_scheduler(self._template, self.steps, start_step=k, device=CPU)
        return self._denoise(prompts, latents.clone(), scheduler, k, set())

    def refine(self, prompts: Sequence[str], seeds: Sequence[int], finals: torch.Tensor, k: int) -> Batch:
        """MoDM's hit: noise cached final latents to step k's timestep, denoise the rest."""
        scheduler = new_scheduler(self._template, self.steps, start_step=k, device=CPU)
        noise = torch.cat([self._noise(prompt, seed) for prompt, seed in zip(prompts, seeds, strict=True)])
        start = scheduler.add_noise(finals, noise, scheduler.timesteps[k : k + 1])
        return self._denoise(prompts, start, scheduler, k, set())

    def images(self, latents: torch.Tensor) -> Images:
        with torch.inference_mode():
            pixels = vae_decode(self.pipe.vae, latents).float()
        array = ((pixels / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
        return list(array)

    def _noise(self, prompt: str, seed: int) -> torch.Tensor:
        params = GenerationParams(
            prompt=prompt, seed=seed, steps=self.steps, width=self.size, height=self.size
        )
        channels = int(self.pipe.unet.config.in_channels)
        return seeded_noise(params, channels, scale=VAE_SCALE_FACTOR, device=CPU, dtype=torch.float32)

    def _denoise(
        self, prompts: Sequence[str], latents: torch.Tensor, scheduler: Any, start: int, capture: set[int]
    ) -> Batch:
        guided = self.guidance > 1.0
        captured: dict[int, torch.Tensor] = {}
        with torch.inference_mode():
            positive, negative = self.pipe.encode_prompt(list(prompts), CPU, 1, guided)
            embeds = torch.cat([negative, positive]) if guided else positive
            kwargs = step_kwargs(scheduler, 0)
            for index in range(start, self.steps):
                t = scheduler.timesteps[index]
                model_in = scheduler.scale_model_input(torch.cat([latents] * 2) if guided else latents, t)
                noise_pred = self.pipe.unet(model_in, t, encoder_hidden_states=embeds, return_dict=False)[0]
                if guided:
                    uncond, cond = noise_pred.chunk(2)
                    noise_pred = uncond + self.guidance * (cond - uncond)
                latents = scheduler.step(noise_pred, t, latents, **kwargs, return_dict=False)[0]
                if index + 1 in capture:
                    captured[index + 1] = latents.clone()
        return Batch(latents=latents, captured=captured)
