"""The denoising loop and its scheduler, written from the pipeline's components (encode_prompt,
unet, scheduler) rather than by calling the pipeline, so that capture, evaluation counts and
cancellation are exact: diffusers' img2img picks its start with int(T * strength), which can run
one step more or less than T - k.

Step k of the schedule is the k-th UNet evaluation (a classifier-free-guidance batch counts as
one): schedulers that evaluate the UNet more than once per step are refused.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from core.errors import GenerationCanceled
from core.params import GenerationParams
from workers.runtime.latents import to_numpy
from workers.runtime.results import Latent

ShouldStop = Callable[[], bool]
"""Asked before every step; True cancels the run (GenerationCanceled)."""

OnStep = Callable[[int, int], None]
"""Told after every step: (steps of the schedule done, the schedule's T). A job's progress."""


@dataclass(slots=True)
class DenoiseRun:
    """A denoising run as it goes: the current latents, the captured ones, each step's time."""

    latents: torch.Tensor
    captured: dict[int, Latent]
    step_ms: list[float]
    shared_ms: float = 0.0  # of step_ms, the time that ran other jobs' samples (a step-level batch)
    reused_steps: int = 0  # of its steps, those that reused a full call's work (a step cache)


def denoise(
    pipe: Any,
    scheduler: Any,
    latents: torch.Tensor,
    embeds: torch.Tensor,
    guided: bool,
    params: GenerationParams,
    start_step: int,
    capture: set[int],
    should_stop: ShouldStop | None,
    *,
    device: torch.device,
    on_step: OnStep | None = None,
) -> DenoiseRun:
    """Run schedule steps start_step..T-1: one UNet evaluation each (both halves of a
    guidance batch in one forward pass); capture the latent after each step k in `capture`."""
    run = DenoiseRun(latents=latents, captured={}, step_ms=[])
    kwargs = step_kwargs(scheduler, params.seed)
    for index in range(start_step, params.steps):
        if should_stop is not None and should_stop():
            raise GenerationCanceled(f"canceled after {index} of {params.steps} steps", step=index)
        step_started = time.perf_counter()
        t = scheduler.timesteps[index]
        model_in = torch.cat([run.latents] * 2) if guided else run.latents
        model_in = scheduler.scale_model_input(model_in, t)
        noise_pred = pipe.unet(model_in, t, encoder_hidden_states=embeds, return_dict=False)[0]
        if guided:
            uncond, cond = noise_pred.chunk(2)
            noise_pred = uncond + params.guidance * (cond - uncond)
        run.latents = scheduler.step(noise_pred, t, run.latents, **kwargs, return_dict=False)[0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # so step_ms is the step's GPU time, not its launch
        run.step_ms.append((time.perf_counter() - step_started) * 1000.0)
        if index + 1 in capture:
            run.captured[index + 1] = to_numpy(run.latents)
        if on_step is not None:
            on_step(index + 1, params.steps)
    return run


def encode_prompt(pipe: Any, params: GenerationParams, device: torch.device) -> tuple[torch.Tensor, bool]:
    """Prompt embeddings; with guidance > 1 the negative (or empty) prompt's come first,
    batched with the prompt's, as diffusers' pipelines do."""
    guided = params.guidance > 1.0
    positive, negative = pipe.encode_prompt(
        params.prompt, device, 1, guided, negative_prompt=params.negative_prompt
    )
    return (torch.cat([negative, positive]) if guided else positive), guided


def seeded_noise(
    params: GenerationParams, channels: int, *, scale: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Seeded Gaussian noise, drawn on the CPU so a seed gives the same noise on every device."""
    generator = torch.Generator("cpu").manual_seed(params.seed)
    shape = (1, channels, params.height // scale, params.width // scale)
    noise = torch.randn(shape, generator=generator, dtype=torch.float32)
    return noise.to(device, dtype)


def new_scheduler(template: Any, steps: int, *, start_step: int, device: torch.device) -> Any:
    """A fresh scheduler per call (schedulers keep step state), set to T steps and told where
    the run starts, so schedulers that index sigmas by step count from there."""
    scheduler = type(template).from_config(template.config)
    scheduler.set_timesteps(steps, device=device)
    if len(scheduler.timesteps) != steps:  # refused at load by `order`; this guards the indexing
        raise RuntimeError(
            f"{type(scheduler).__name__} made {len(scheduler.timesteps)} timesteps for {steps}"
        )
    if hasattr(scheduler, "set_begin_index"):
        scheduler.set_begin_index(start_step)
    return scheduler


def step_kwargs(scheduler: Any, seed: int) -> dict[str, Any]:
    """DDIM with eta=0 (deterministic, NIRVANA 6); a seeded generator for stochastic ones."""
    accepted = inspect.signature(scheduler.step).parameters
    kwargs: dict[str, Any] = {}
    if "eta" in accepted:
        kwargs["eta"] = 0.0
    if "generator" in accepted:
        kwargs["generator"] = torch.Generator("cpu").manual_seed(seed + 1)
    return kwargs


def scheduler_template(pipeline_scheduler: Any, name: str | None) -> Any:
    """The scheduler each call copies: the pipeline's own, or the diffusers class `name`."""
    template = pipeline_scheduler
    if name is not None:
        import diffusers

        cls = getattr(diffusers, name, None)
        if cls is None or not hasattr(cls, "from_config"):
            raise ValueError(f"{name!r} is not a diffusers scheduler class")
        template = cls.from_config(pipeline_scheduler.config)
    if getattr(template, "order", 1) != 1:
        # Step k of the schedule must be the k-th UNet evaluation for capture, resume and counts.
        raise ValueError(
            f"{type(template).__name__} evaluates the UNet {template.order} times per step; "
            "use a first-order scheduler (DDIM, Euler, DPM-Solver++ multistep, ...)"
        )
    return template
