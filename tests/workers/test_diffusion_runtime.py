"""The diffusion runtime on the tiny models: exact resume, exact evaluation counts, checks, roles."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from core.errors import GenerationCanceled, LatentError, PromptError, SizeError, StepsError
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import Role
from workers.runtime import TINY_NOTICE, DiffusionRuntime, RoleMismatch, TinyModelPaths, resolve_model_sources
from workers.runtime import loading as loading_module
from workers.runtime import runtime as runtime_module

CAPTURE = {5, 10, 15, 20, 25}  # NIRVANA 5.3's K, the default capture set


def _params(steps: int = 10, **overrides: Any) -> GenerationParams:
    return GenerationParams(
        **{"prompt": "a red lighthouse", "seed": 7, "steps": steps, "width": 64, "height": 64, **overrides}
    )


def _stop_after(calls: int) -> tuple[Callable[[], bool], list[int]]:
    """A should_stop that says stop on call number calls + 1, and counts its calls."""
    seen: list[int] = []

    def should_stop() -> bool:
        seen.append(1)
        return len(seen) > calls

    return should_stop, seen


@pytest.fixture(scope="module")
def full_run(large: DiffusionRuntime) -> Any:
    return large.generate(_params(steps=50), capture=CAPTURE, decode=True)


def test_generate_captures_latents_and_counts_one_eval_per_step(
    full_run: Any, large: DiffusionRuntime
) -> None:
    assert set(full_run.captured) == CAPTURE
    assert full_run.denoiser_evals == {large.model_name: 50}
    assert len(full_run.step_ms) == 50 and full_run.wall_s > 0
    assert full_run.final_latent.shape == (4, 8, 8) and full_run.final_latent.dtype == np.float32
    assert full_run.image.size == (64, 64) and full_run.image.mode == "RGB"
    assert full_run.vae_decodes == 1
    assert (full_run.family, full_run.role, full_run.start_step) == ("tiny-sd", Role.LARGE, 0)


@pytest.mark.parametrize("k", sorted(CAPTURE))
def test_resume_from_own_capture_reproduces_the_full_run_exactly(
    full_run: Any, large: DiffusionRuntime, k: int
) -> None:
    resumed = large.resume(_params(steps=50), full_run.captured[k], k, family="tiny-sd")
    assert torch.equal(torch.from_numpy(resumed.final_latent), torch.from_numpy(full_run.final_latent))
    assert resumed.denoiser_evals == {large.model_name: 50 - k}
    assert resumed.start_step == k and resumed.steps_run == 50 - k


def test_resume_with_another_prompt_runs_but_differs(full_run: Any, large: DiffusionRuntime) -> None:
    resumed = large.resume(
        _params(steps=50, prompt="a blue whale"), full_run.captured[10], 10, family="tiny-sd"
    )
    assert resumed.denoiser_evals == {large.model_name: 40}
    assert not np.array_equal(resumed.final_latent, full_run.final_latent)


def test_guidance_batch_counts_as_one_evaluation(small: DiffusionRuntime) -> None:
    guided = small.generate(_params(guidance=7.5))
    unguided = small.generate(_params(guidance=1.0))
    assert guided.denoiser_evals == unguided.denoiser_evals == {small.model_name: 10}
    assert not np.array_equal(guided.final_latent, unguided.final_latent)  # guidance did run


def test_generation_is_seeded(small: DiffusionRuntime) -> None:
    first, again, other = (small.generate(_params(seed=seed)) for seed in (3, 3, 4))
    assert np.array_equal(first.final_latent, again.final_latent)
    assert not np.array_equal(first.final_latent, other.final_latent)


@pytest.mark.parametrize(
    ("scheduler", "exact"), [("EulerDiscreteScheduler", True), ("DPMSolverMultistepScheduler", False)]
)
def test_resume_with_other_schedulers_counts_the_remaining_steps(
    tiny_settings: Settings, scheduler: str, exact: bool
) -> None:
    runtime = DiffusionRuntime(tiny_settings, Role.SMALL, scheduler=scheduler)
    full = runtime.generate(_params(), capture={4})
    resumed = runtime.resume(_params(), full.captured[4], 4, family="tiny-sd")
    assert resumed.denoiser_evals == {runtime.model_name: 6}
    assert np.isfinite(resumed.final_latent).all()
    # Euler is single-step and deterministic: with the begin index set, resume is exact. DPM-Solver++
    # is multistep: its history restarts at k, so only the step count is guaranteed.
    assert np.array_equal(resumed.final_latent, full.final_latent) is exact


def test_second_order_schedulers_are_refused(tiny_settings: Settings) -> None:
    with pytest.raises(ValueError, match="first-order"):
        DiffusionRuntime(tiny_settings, Role.SMALL, scheduler="HeunDiscreteScheduler")


def test_refine_runs_exactly_t_minus_k_evaluations_for_every_k(small: DiffusionRuntime) -> None:
    steps = 7
    source = small.generate(_params(steps=steps)).final_latent
    for k in range(1, steps):
        refined = small.refine(_params(steps=steps, prompt="a green lighthouse"), source, "tiny-sd", k)
        assert refined.denoiser_evals == {small.model_name: steps - k}, k
        assert refined.start_step == k


def test_refine_with_a_euler_scheduler_counts_exactly(tiny_settings: Settings) -> None:
    runtime = DiffusionRuntime(tiny_settings, Role.SMALL, scheduler="EulerDiscreteScheduler")
    source = np.zeros((4, 8, 8), dtype=np.float32)
    for k in (1, 3, 5):
        assert runtime.refine(_params(steps=6), source, "tiny-sd", k).denoiser_evals == {
            runtime.model_name: 6 - k
        }


def test_refine_more_skipped_steps_stays_closer_to_the_source(small: DiffusionRuntime) -> None:
    source = small.generate(_params(steps=20)).final_latent
    distances = [
        float(
            np.abs(
                small.refine(_params(steps=20, prompt="other"), source, "tiny-sd", k).final_latent - source
            ).mean()
        )
        for k in (2, 18)
    ]
    assert distances[1] < distances[0]


def test_refine_from_another_family_goes_through_pixels(
    tiny_settings: Settings, tiny_paths: TinyModelPaths
) -> None:
    other = load_settings(
        data_dir=tiny_settings.data_dir,
        device="cpu",
        small_model=str(tiny_paths.small),
        small_family="tiny-sd-b",
        model_set="tiny",
    )
    runtime = DiffusionRuntime(other, Role.SMALL)
    assert runtime.family == "tiny-sd-b"
    source = runtime.generate(_params()).final_latent
    translated = runtime.refine(_params(), source, "tiny-sd", 5)
    native = runtime.refine(_params(), source, "tiny-sd-b", 5)
    assert translated.denoiser_evals == native.denoiser_evals == {runtime.model_name: 5}
    assert translated.family == "tiny-sd-b"
    assert (translated.vae_decodes, native.vae_decodes) == (1, 0)  # the source's VAE decodes it
    # The same array read as a tiny-sd latent is decoded and re-encoded, so the start differs.
    assert not np.array_equal(translated.final_latent, native.final_latent)
    with pytest.raises(LatentError, match="unknown"):
        runtime.refine(_params(), source, "sdxl", 5)
    with pytest.raises(LatentError, match="family"):
        runtime.resume(_params(), source, 5, family="tiny-sd")


def test_should_stop_is_checked_before_every_step(small: DiffusionRuntime) -> None:
    never, calls = _stop_after(10**6)
    small.generate(_params(), should_stop=never)
    assert len(calls) == 10
    latent = small.generate(_params(), capture={4}).captured[4]
    small.resume(_params(), latent, 4, family="tiny-sd", should_stop=never)
    assert len(calls) == 10 + 6

    stop, _ = _stop_after(3)
    with pytest.raises(GenerationCanceled) as canceled:
        small.generate(_params(), should_stop=stop)
    assert canceled.value.step == 3
    stop, _ = _stop_after(2)
    with pytest.raises(GenerationCanceled) as canceled:
        small.refine(_params(), latent, "tiny-sd", 4, should_stop=stop)
    assert canceled.value.step == 6


def test_a_batched_latent_is_accepted(full_run: Any, large: DiffusionRuntime) -> None:
    batched = full_run.captured[25][np.newaxis]
    resumed = large.resume(_params(steps=50), batched, 25, family="tiny-sd")
    assert np.array_equal(resumed.final_latent, full_run.final_latent)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda rt: rt.generate(_params(prompt="  ")), PromptError),
        (lambda rt: rt.generate(_params(width=60)), SizeError),
        (lambda rt: rt.generate(_params(), capture={10}), StepsError),
        (lambda rt: rt.generate(_params(), capture={0}), StepsError),
        (lambda rt: rt.resume(_params(), np.zeros((4, 8, 8), np.float32), 0, family="tiny-sd"), StepsError),
        (lambda rt: rt.resume(_params(), np.zeros((4, 8, 8), np.float32), 10, family="tiny-sd"), StepsError),
        (lambda rt: rt.refine(_params(), np.zeros((4, 8, 8), np.float32), "tiny-sd", 10), StepsError),
        (
            lambda rt: rt.resume(_params(), np.zeros((4, 16, 16), np.float32), 5, family="tiny-sd"),
            LatentError,
        ),
        (lambda rt: rt.resume(_params(), np.zeros((3, 8, 8), np.float32), 5, family="tiny-sd"), LatentError),
        (
            lambda rt: rt.resume(_params(), np.zeros((2, 4, 8, 8), np.float32), 5, family="tiny-sd"),
            LatentError,
        ),
        (lambda rt: rt.resume(_params(), np.zeros((4, 8, 8), np.int32), 5, family="tiny-sd"), LatentError),
        (
            lambda rt: rt.resume(_params(), np.full((4, 8, 8), np.nan, np.float32), 5, family="tiny-sd"),
            LatentError,
        ),
        (lambda rt: rt.resume(_params(), [[0.0]], 5, family="tiny-sd"), LatentError),
        (lambda rt: rt.resume(_params(), np.zeros((4, 8, 8), np.float32), 5, family="sd15"), LatentError),
        (lambda rt: rt.refine(_params(), np.zeros((4, 8, 8), np.float32), "sd15", 5), LatentError),
        (lambda rt: rt.refine(_params(), torch.zeros(4, 8, 8, dtype=torch.int64), "tiny-sd", 5), LatentError),
        (lambda rt: rt.decode(np.zeros((4, 8, 8), np.float32), family="sd15"), LatentError),
        (lambda rt: rt.decode(np.zeros((4, 0, 8), np.float32), family="tiny-sd"), LatentError),
    ],
)
def test_bad_inputs_fail_before_any_model_work(
    small: DiffusionRuntime,
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[[DiffusionRuntime], Any],
    error: type,
) -> None:
    def no_model_work(*_: Any, **__: Any) -> Any:
        raise AssertionError("model work started before the inputs were checked")

    monkeypatch.setattr(DiffusionRuntime._prompts, "encode", no_model_work)
    monkeypatch.setattr(runtime_module, "to_image", no_model_work)
    monkeypatch.setattr(small, "_family_vae", no_model_work)
    with pytest.raises(error):
        call(small)


def test_generation_decodes_only_when_asked(small: DiffusionRuntime) -> None:
    """LatentBox 4.1: generate, resume and refine return the latent alone unless decode=True."""
    before = small.vae_decodes
    plain = small.generate(_params(), capture={4})
    resumed = small.resume(_params(), plain.captured[4], 4, family="tiny-sd")
    refined = small.refine(_params(), plain.final_latent, "tiny-sd", 4)
    assert (plain.image, resumed.image, refined.image) == (None, None, None)
    assert (plain.vae_decodes, resumed.vae_decodes, refined.vae_decodes) == (0, 0, 0)
    assert small.vae_decodes == before
    decoded = small.resume(_params(), plain.captured[4], 4, family="tiny-sd", decode=True)
    assert decoded.image is not None and decoded.vae_decodes == 1
    assert small.vae_decodes == before + 1


def test_decode_role_reproduces_the_generated_image(tiny_settings: Settings, full_run: Any) -> None:
    runtime = DiffusionRuntime(tiny_settings, Role.DECODE)
    assert runtime._pipe is None  # the VAE only
    decoded = runtime.decode(full_run.final_latent, family="tiny-sd")
    assert decoded.denoiser_evals == {}
    assert np.array_equal(np.asarray(decoded.image), np.asarray(full_run.image))
    with pytest.raises(RoleMismatch):
        runtime.generate(_params())


def test_switching_role_releases_the_old_model(tiny_settings: Settings) -> None:
    runtime = DiffusionRuntime(tiny_settings, Role.DECODE)
    old_vae = runtime._vae
    runtime.switch_role(Role.SMALL)
    assert runtime.role is Role.SMALL and runtime._vae is not old_vae
    result = runtime.generate(_params(steps=3))
    assert result.denoiser_evals == {"tiny-small": 3} and result.role is Role.SMALL
    runtime.release()
    assert runtime._pipe is None and runtime._vae is None
    with pytest.raises(RoleMismatch):
        runtime.generate(_params(steps=3))
    with pytest.raises(ValueError, match="hosts no model"):
        runtime.switch_role(Role.ADMIT)


def test_tiny_notice_is_logged_once(
    tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(loading_module, "_tiny_notice_logged", False)
    with caplog.at_level(logging.WARNING, logger="workers.runtime.loading"):
        resolve_model_sources(tiny_settings)
        sources = resolve_model_sources(tiny_settings)
    assert [r.getMessage() for r in caplog.records].count(TINY_NOTICE) == 1
    assert sources.large.endswith("large") and sources.decode.subfolder == "vae"
