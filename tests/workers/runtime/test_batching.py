"""Step-level batching (workers.runtime.batching): one UNet call per step over every member, each at
its own timestep, with its own scheduler, guidance, capture and cancellation.

With a stand-in UNet whose prediction for a sample depends on that sample alone, the batch must equal
denoise() bit for bit: that checks the bookkeeping (rows, timesteps, guidance, scheduler state). With
the lab's large model (a real UNet2DConditionModel with addition_embed_type="text"), a batch of one
equals generate/resume bit for bit, and a batch of several each job alone within BATCH_ATOL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import diffusers
import numpy as np
import numpy.typing as npt
import pytest
import torch

from core.errors import BatchFull, GenerationCanceled, SettingsError
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime, GenerationResult
from workers.runtime.batching import BATCH_ATOL, BatchMember, DenoisingBatch
from workers.runtime.denoising import DenoiseRun, denoise, new_scheduler, seeded_noise

torch.set_num_threads(1)
CPU = torch.device("cpu")
STEPS = 20  # the lab's models at T = 20: each test runs in seconds on a shared core
PROMPTS = (
    "a small red circle left of a blue square on a striped yellow background",
    "a big green triangle on a plain white background",
    "a blue square above a red circle on a dotted black background",
    "a yellow star right of a green circle on a plain grey background",
)


# --- a stand-in UNet: each sample's prediction depends on that sample, its timestep and its prompt ---------


class _PerSampleUnet:
    """eps = x * t / 1000 + mean(embeds): exact IEEE arithmetic per element, so a sample's prediction is
    the same bits in any batch. Records each call's per-sample timesteps."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(
        self, x: torch.Tensor, t: torch.Tensor, *, encoder_hidden_states: torch.Tensor, **_: Any
    ) -> Any:
        per_sample = t.reshape(-1).expand(x.shape[0]).to(x.dtype)  # a 0-d t (denoise) or one per sample
        self.calls.append([int(v) for v in per_sample])
        prompt = encoder_hidden_states.mean(dim=(1, 2)).reshape(-1, 1, 1, 1)
        return (x * (per_sample.reshape(-1, 1, 1, 1) / 1000.0) + prompt,)


def _scheduler(name: str, start_step: int) -> Any:
    return new_scheduler(getattr(diffusers, name)(), STEPS, start_step=start_step, device=CPU)


def _job(seed: int, guidance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A job's starting latents and its embeddings (the guided pair, or one)."""
    params = GenerationParams(prompt="x", seed=seed, width=32, height=32)
    latents = seeded_noise(params, 4, scale=8, device=CPU, dtype=torch.float32)
    embeds = torch.randn(2 if guidance > 1 else 1, 3, 8, generator=torch.Generator().manual_seed(seed))
    return latents, embeds


def _alone(
    unet: Any, scheduler_name: str, seed: int, guidance: float, start: int, capture: set[int]
) -> DenoiseRun:
    latents, embeds = _job(seed, guidance)
    params = GenerationParams(prompt="x", seed=seed, steps=STEPS, width=32, height=32, guidance=guidance)
    scheduler = _scheduler(scheduler_name, start)
    return denoise(
        SimpleNamespace(unet=unet),
        scheduler,
        latents,
        embeds,
        guidance > 1,
        params,
        start,
        capture,
        None,
        device=CPU,
    )


def _member(
    scheduler_name: str, seed: int, guidance: float, start: int, capture: set[int], **more: Any
) -> BatchMember:
    latents, embeds = _job(seed, guidance)
    return BatchMember(
        latents=latents,
        scheduler=_scheduler(scheduler_name, start),
        embeds=embeds,
        guidance=guidance,
        steps=STEPS,
        step=start,
        seed=seed,
        capture=capture,
        **more,
    )


# (seed, guidance, start step, capture): a guided miss, an unguided miss, hits resumed at k = 5 and 12
JOBS: tuple[tuple[int, float, int, set[int]], ...] = (
    (1, 7.5, 0, {5, 10}),
    (2, 1.0, 0, {3}),
    (3, 3.0, 5, set()),
    (4, 12.0, 12, {15}),
)


@pytest.mark.parametrize("scheduler_name", ["DDIMScheduler", "EulerDiscreteScheduler"])
def test_with_a_per_sample_unet_every_member_equals_denoise_bit_for_bit(scheduler_name: str) -> None:
    """Guided and unguided members, each at its own step and with its own scheduler instance (Euler's
    scale_model_input and step index), the last one admitted after the batch has run 3 steps."""
    unet = _PerSampleUnet()
    batch = DenoisingBatch(unet, max_batch=4, device=CPU)
    members = [_member(scheduler_name, *job) for job in JOBS]
    for member in members[:3]:
        batch.admit(member)
    retired: list[BatchMember] = []
    for _ in range(3):
        retired += batch.step().retired
    batch.admit(members[3])
    while len(batch):
        retired += batch.step().retired
    assert {id(m) for m in retired} == {id(m) for m in members}
    assert [len(call) for call in unet.calls[:4]] == [5, 5, 5, 7]  # 2 + 1 + 2 samples, then + 2
    assert unet.calls[0][:3] == [unet.calls[0][0]] * 3 and unet.calls[0][3] != unet.calls[0][0]
    for member, job in zip(members, JOBS, strict=True):
        alone = _alone(_PerSampleUnet(), scheduler_name, *job)
        run = member.result()
        assert torch.equal(run.latents, alone.latents)
        assert run.captured.keys() == alone.captured.keys() == job[3]
        assert all(np.array_equal(run.captured[k], alone.captured[k]) for k in job[3])
        assert len(run.step_ms) == STEPS - job[2]


def test_each_call_runs_each_member_at_its_own_timestep() -> None:
    unet = _PerSampleUnet()
    batch = DenoisingBatch(unet, max_batch=3, device=CPU)
    miss, hit = _member("DDIMScheduler", 1, 7.5, 0, set()), _member("DDIMScheduler", 2, 1.0, 12, set())
    batch.admit(miss)
    batch.admit(hit)
    step = batch.step()
    timesteps = miss.scheduler.timesteps
    assert unet.calls == [[int(timesteps[0])] * 2 + [int(timesteps[12])]]
    assert (step.size, step.retired, miss.step, hit.step) == (2, (), 1, 13)


def test_a_member_canceled_mid_batch_retires_with_its_error_and_the_others_are_unharmed() -> None:
    asked: list[int] = []

    def stop_after_four() -> bool:
        asked.append(1)
        return len(asked) > 4

    progress: list[tuple[int, int]] = []
    canceled = _member(
        "DDIMScheduler", 9, 7.5, 0, {10}, should_stop=stop_after_four, on_step=lambda *s: progress.append(s)
    )
    batch = DenoisingBatch(_PerSampleUnet(), max_batch=4, device=CPU)
    members = [_member("DDIMScheduler", *job) for job in JOBS[:2]]
    for member in (members[0], canceled, members[1]):
        batch.admit(member)
    steps = [batch.step() for _ in range(5)]
    assert steps[4].retired == (canceled,) and steps[4].size == 2 and len(batch) == 2
    assert progress == [(n, STEPS) for n in range(1, 5)]  # told after each of its 4 steps, not after
    with pytest.raises(GenerationCanceled) as error:
        canceled.result()
    assert error.value.step == 4 and canceled.captured == {}
    while len(batch):
        batch.step()
    for member, job in zip(members, JOBS[:2], strict=True):
        assert torch.equal(member.result().latents, _alone(_PerSampleUnet(), "DDIMScheduler", *job).latents)


def test_a_callback_that_fails_retires_only_its_member() -> None:
    def broken(done: int, steps: int) -> None:
        if done == 2:
            raise RuntimeError("progress store down")

    failing = _member("DDIMScheduler", 5, 7.5, 0, set(), on_step=broken)
    batch = DenoisingBatch(_PerSampleUnet(), max_batch=2, device=CPU)
    other = _member("DDIMScheduler", *JOBS[0])
    batch.admit(failing)
    batch.admit(other)
    assert batch.step().retired == () and batch.step().retired == (failing,)
    with pytest.raises(RuntimeError, match="progress store down"):
        failing.result()
    while len(batch):
        batch.step()
    assert torch.equal(other.result().latents, _alone(_PerSampleUnet(), "DDIMScheduler", *JOBS[0]).latents)


def test_admission_is_refused_when_full_for_another_shape_and_for_a_member_already_in() -> None:
    batch = DenoisingBatch(_PerSampleUnet(), max_batch=2, device=CPU)
    first = _member("DDIMScheduler", 1, 7.5, 0, set())
    batch.admit(first)
    with pytest.raises(ValueError, match="already in the batch"):
        batch.admit(first)
    larger = BatchMember(
        latents=torch.zeros(1, 4, 8, 8),
        scheduler=_scheduler("DDIMScheduler", 0),
        embeds=torch.zeros(2, 3, 8),
        guidance=7.5,
        steps=STEPS,
        step=0,
        seed=0,
    )
    with pytest.raises(ValueError, match="cannot share a UNet call"):
        batch.admit(larger)
    batch.admit(_member("DDIMScheduler", 2, 1.0, 0, set()))
    with pytest.raises(BatchFull):
        batch.admit(_member("DDIMScheduler", 3, 1.0, 0, set()))
    with pytest.raises(RuntimeError, match="not finished"):
        first.result()


def test_a_member_needs_embeddings_for_its_guidance_and_a_step_inside_the_schedule() -> None:
    latents, embeds = _job(1, 1.0)
    with pytest.raises(ValueError, match="takes 2 prompt embeddings"):
        BatchMember(
            latents=latents,
            scheduler=_scheduler("DDIMScheduler", 0),
            embeds=embeds,
            guidance=7.5,
            steps=STEPS,
            step=0,
            seed=1,
        )
    with pytest.raises(ValueError, match="outside"):
        _member("DDIMScheduler", 1, 1.0, STEPS, set())


# --- the lab's large model -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir: Path = tmp_path_factory.mktemp("lab-data")
    return load_settings(data_dir=data_dir, device="cpu", model_set="lab", steps=STEPS, capture_steps="5,10")


@pytest.fixture(scope="module")
def runtime(lab_settings: Settings) -> DiffusionRuntime:
    return DiffusionRuntime(lab_settings, Role.LARGE)


def _params(index: int, guidance: float = 7.5) -> GenerationParams:
    prompt = PROMPTS[index % len(PROMPTS)]
    return GenerationParams(prompt=prompt, seed=index, steps=STEPS, width=64, height=64, guidance=guidance)


def _diff(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> float:
    return float(np.abs(first - second).max())


def _results(outcomes: list[GenerationResult | GenerationCanceled]) -> list[GenerationResult]:
    assert all(isinstance(outcome, GenerationResult) for outcome in outcomes), outcomes
    return [outcome for outcome in outcomes if isinstance(outcome, GenerationResult)]


def test_the_lab_unet_takes_one_timestep_per_sample(runtime: DiffusionRuntime) -> None:
    unet = runtime.new_batch().unet
    assert unet.config.addition_embed_type == "text"  # its added embedding reads the prompt per sample
    sample = torch.randn(2, unet.config.in_channels, 8, 8, generator=torch.Generator().manual_seed(0))
    embeds = torch.randn(2, 32, unet.config.cross_attention_dim, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        both = unet(sample, torch.tensor([900, 100]), encoder_hidden_states=embeds, return_dict=False)[0]
        for row, t in enumerate((900, 100)):
            alone = unet(sample[row : row + 1], torch.tensor(t), encoder_hidden_states=embeds[row : row + 1])[
                0
            ]
            assert torch.allclose(both[row : row + 1], alone, atol=1e-5, rtol=0)


def test_a_batch_of_one_equals_generate_and_resume_bit_for_bit(runtime: DiffusionRuntime) -> None:
    params = _params(0)
    alone = runtime.generate(params, capture=[5, 10])
    (batched,) = _results(runtime.generate_batch([runtime.generation_member(params, capture=[5, 10])]))
    assert batched.final_latent.tobytes() == alone.final_latent.tobytes()
    assert all(batched.captured[k].tobytes() == alone.captured[k].tobytes() for k in (5, 10))
    assert (batched.denoiser_evals, batched.start_step, len(batched.step_ms)) == (
        {"lab-large": STEPS},
        0,
        STEPS,
    )

    resumed = runtime.resume(params, alone.captured[10], 10, family=runtime.family)
    member = runtime.resume_member(params, alone.captured[10], 10, family=runtime.family)
    (batched,) = _results(runtime.generate_batch([member]))
    assert batched.final_latent.tobytes() == resumed.final_latent.tobytes() == alone.final_latent.tobytes()
    assert (batched.start_step, batched.denoiser_evals) == (10, {"lab-large": STEPS - 10})


def test_a_batch_with_its_own_guidance_and_capture_per_member_equals_each_job_alone(
    runtime: DiffusionRuntime,
) -> None:
    guidances = (7.5, 1.0, 3.0, 12.0)
    captures: list[list[int]] = [[5], [], [5, 10], [10]]
    jobs = [_params(i, guidance) for i, guidance in enumerate(guidances)]
    alone = [runtime.generate(job, capture=capture) for job, capture in zip(jobs, captures, strict=True)]
    members = [
        runtime.generation_member(job, capture=capture) for job, capture in zip(jobs, captures, strict=True)
    ]
    batched = _results(runtime.generate_batch(members))
    for mine, theirs, capture in zip(batched, alone, captures, strict=True):
        assert _diff(mine.final_latent, theirs.final_latent) <= BATCH_ATOL
        assert sorted(mine.captured) == capture
        assert all(_diff(mine.captured[k], theirs.captured[k]) <= BATCH_ATOL for k in capture)
    # The tolerance tells guidances apart: one guidance for every member would fail it.
    other_guidance = runtime.generate(_params(0, 12.0)).final_latent
    assert _diff(other_guidance, alone[0].final_latent) > 20 * BATCH_ATOL


def test_a_hit_resumed_at_k_joins_a_running_batch_and_equals_an_unbatched_resume(
    runtime: DiffusionRuntime,
) -> None:
    source = runtime.generate(_params(1), capture=[10])
    hit_params = _params(1)  # the same prompt and seed: the resume reproduces the source's final latent
    expected_hit = runtime.resume(hit_params, source.captured[10], 10, family=runtime.family)
    misses = [_params(2), _params(3, 1.0)]
    alone = [runtime.generate(job) for job in misses]

    batch = runtime.new_batch(max_batch=3)
    miss_members = [runtime.generation_member(job) for job in misses]
    for member in miss_members:
        batch.admit(member)
    for _ in range(4):
        batch.step()
    hit = runtime.resume_member(hit_params, source.captured[10], 10, family=runtime.family)
    batch.admit(hit)  # joins at its step 10 beside misses at step 4
    assert [member.step for member in batch.members] == [4, 4, 10]
    finished_at: dict[int, int] = {}
    for count in range(1, STEPS):
        for member in batch.step().retired:
            finished_at[id(member)] = count
        if not len(batch):
            break
    assert finished_at[id(hit)] == STEPS - 10 and finished_at[id(miss_members[0])] == STEPS - 4
    hit_result = runtime.batch_result(hit)
    assert _diff(hit_result.final_latent, expected_hit.final_latent) <= BATCH_ATOL
    assert hit_result.start_step == 10 and len(hit_result.step_ms) == STEPS - 10
    for member, reference in zip(miss_members, alone, strict=True):
        assert _diff(runtime.batch_result(member).final_latent, reference.final_latent) <= BATCH_ATOL


def _stop_after(steps: int) -> Callable[[], bool]:
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > steps

    return stop


def test_a_member_canceled_mid_batch_leaves_the_others_as_a_batch_run_without_it(
    runtime: DiffusionRuntime,
) -> None:
    jobs = [_params(0), _params(2, 1.0)]
    without = _results(runtime.generate_batch([runtime.generation_member(job) for job in jobs]))

    canceled = runtime.generation_member(_params(3), should_stop=_stop_after(6))
    outcomes = runtime.generate_batch(
        [runtime.generation_member(jobs[0]), canceled, runtime.generation_member(jobs[1])]
    )
    assert isinstance(outcomes[1], GenerationCanceled) and outcomes[1].step == 6
    for outcome, reference in zip(_results([outcomes[0], outcomes[2]]), without, strict=True):
        assert _diff(outcome.final_latent, reference.final_latent) <= BATCH_ATOL

    # Canceled before its first step, it never shared a UNet call: the others are the same bits.
    gone = runtime.generation_member(_params(3), should_stop=_stop_after(0))
    outcomes = runtime.generate_batch(
        [runtime.generation_member(jobs[0]), gone, runtime.generation_member(jobs[1])]
    )
    assert isinstance(outcomes[1], GenerationCanceled) and outcomes[1].step == 0
    for outcome, reference in zip(_results([outcomes[0], outcomes[2]]), without, strict=True):
        assert outcome.final_latent.tobytes() == reference.final_latent.tobytes()


def test_generate_batch_admits_the_next_job_as_a_slot_frees(runtime: DiffusionRuntime) -> None:
    jobs = [_params(0), _params(1), _params(2)]
    hit_latent = runtime.generate(jobs[1], capture=[10]).captured[10]
    timeline: list[tuple[str, int]] = []

    def told(name: str) -> Callable[[int, int], None]:
        return lambda done, steps: timeline.append((name, done))

    members = [
        runtime.generation_member(jobs[0], on_step=told("miss")),
        runtime.resume_member(jobs[1], hit_latent, 10, family=runtime.family, on_step=told("hit")),
        runtime.generation_member(jobs[2], on_step=told("next")),
    ]
    results = _results(runtime.generate_batch(members, max_batch=2))
    assert [result.start_step for result in results] == [0, 10, 0]
    hit_left = timeline.index(("hit", STEPS))  # after 10 steps, beside the miss's 10th
    # The next step ran the miss at its 11th step and the third job, admitted in the hit's slot, at its 1st.
    assert timeline[hit_left - 1 : hit_left + 3] == [("miss", 10), ("hit", STEPS), ("miss", 11), ("next", 1)]
    assert _diff(results[2].final_latent, runtime.generate(jobs[2]).final_latent) <= BATCH_ATOL


def test_the_batch_size_comes_from_settings(runtime: DiffusionRuntime, lab_settings: Settings) -> None:
    assert lab_settings.max_batch == 8 and runtime.new_batch().max_batch == 8
    assert runtime.new_batch(max_batch=3).max_batch == 3
    with pytest.raises(SettingsError, match="REPRISE_MAX_BATCH=0"):
        load_settings(max_batch=0)


def test_the_batch_tolerance_is_batch_atol_plus_two_units_in_the_last_place_at_the_latents_scale() -> None:
    from workers.runtime.batching import BATCH_ATOL, within_batch_tolerance

    alone = np.array([12.0, -3.0, 0.5], dtype=np.float16)  # spacing at 8..16 is 2**-7, above BATCH_ATOL
    one_ulp = alone.copy()
    one_ulp[0] = np.nextafter(alone[0], np.float16(20))
    three_ulps = alone.copy()
    three_ulps[0] = alone[0] + np.float16(3 * 2**-7)
    assert within_batch_tolerance(one_ulp, alone) and within_batch_tolerance(alone, alone)
    assert not within_batch_tolerance(three_ulps, alone)
    small_off = alone.copy()  # a unit at the latent's scale (12) on an element of 0.5: rounded at 12
    small_off[2] = alone[2] + np.float16(2**-7)
    assert within_batch_tolerance(small_off, alone)
    small_off[2] = alone[2] + np.float16(3 * 2**-7)
    assert not within_batch_tolerance(small_off, alone)
    wide = np.array([12.0, -3.0, 0.5], dtype=np.float32)  # float32's spacing is far below BATCH_ATOL
    assert within_batch_tolerance(wide + np.float32(BATCH_ATOL * 0.9), wide)
    assert not within_batch_tolerance(wide + np.float32(BATCH_ATOL * 1.5), wide)
