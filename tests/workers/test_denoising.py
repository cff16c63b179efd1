"""The denoising loop with a stand-in UNet: one evaluation per step, capture, cancellation, and the
scheduler rules (deterministic DDIM, first-order schedulers only)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import diffusers
import pytest
import torch

from core.errors import GenerationCanceled
from core.params import GenerationParams
from workers.runtime.denoising import denoise, new_scheduler, scheduler_template, seeded_noise, step_kwargs

CPU = torch.device("cpu")


def _scheduler(name: str) -> Any:
    """A diffusers scheduler with its default config (diffusers is untyped)."""
    return getattr(diffusers, name)()


class _CountingUnet:
    """Predicts zero noise and counts its forward passes and their batch sizes."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, model_in: torch.Tensor, t: Any, **_: Any) -> tuple[torch.Tensor]:
        self.batches.append(model_in.shape[0])
        return (torch.zeros_like(model_in),)


def _run(
    params: GenerationParams, *, start_step: int = 0, capture: frozenset[int] = frozenset(), stop: Any = None
) -> Any:
    unet = _CountingUnet()
    scheduler = new_scheduler(_scheduler("DDIMScheduler"), params.steps, start_step=start_step, device=CPU)
    latents = seeded_noise(params, 4, scale=8, device=CPU, dtype=torch.float32)
    embeds = torch.zeros(2 if params.guidance > 1 else 1, 3, 8)
    run = denoise(
        SimpleNamespace(unet=unet),
        scheduler,
        latents,
        embeds,
        params.guidance > 1,
        params,
        start_step,
        set(capture),
        stop,
        device=CPU,
    )
    return run, unet


def test_one_evaluation_per_step_with_the_guidance_batch_in_one_pass() -> None:
    params = GenerationParams(prompt="x", steps=6, width=16, height=16, guidance=7.5)
    run, unet = _run(params, start_step=2, capture=frozenset({3, 5}))
    assert unet.batches == [2, 2, 2, 2] and len(run.step_ms) == 4
    assert sorted(run.captured) == [3, 5] and run.captured[5].shape == (4, 2, 2)


def test_should_stop_cancels_before_the_next_step() -> None:
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 2

    params = GenerationParams(prompt="x", steps=6, width=16, height=16, guidance=1.0)
    with pytest.raises(GenerationCanceled) as canceled:
        _run(params, stop=stop)
    assert canceled.value.step == 2


def test_noise_is_seeded() -> None:
    params = GenerationParams(prompt="x", seed=3, width=16, height=16)
    first = seeded_noise(params, 4, scale=8, device=CPU, dtype=torch.float32)
    assert first.shape == (1, 4, 2, 2)
    assert torch.equal(first, seeded_noise(params, 4, scale=8, device=CPU, dtype=torch.float32))


def test_ddim_runs_with_eta_zero_and_stochastic_schedulers_get_a_seeded_generator() -> None:
    assert step_kwargs(_scheduler("DDIMScheduler"), seed=1)["eta"] == 0.0
    first = step_kwargs(_scheduler("EulerAncestralDiscreteScheduler"), seed=1)["generator"]
    again = step_kwargs(_scheduler("EulerAncestralDiscreteScheduler"), seed=1)["generator"]
    assert torch.equal(torch.rand(3, generator=first), torch.rand(3, generator=again))


def test_only_first_order_diffusers_schedulers_are_taken() -> None:
    base = _scheduler("DDIMScheduler")
    assert scheduler_template(base, None) is base
    assert type(scheduler_template(base, "EulerDiscreteScheduler")).__name__ == "EulerDiscreteScheduler"
    with pytest.raises(ValueError, match="times per step"):
        scheduler_template(_scheduler("HeunDiscreteScheduler"), None)
    with pytest.raises(ValueError, match="not a diffusers scheduler"):
        scheduler_template(base, "NoSuchScheduler")
