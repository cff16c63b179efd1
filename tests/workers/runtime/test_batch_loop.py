"""The worker loop of step-level batching (workers.runtime.batch_loop): jobs run by a GPU worker's threads
at the same time share one UNet call per step, each job's result (and error) comes back in its own thread,
and the worker switches its model only between batches.

The lab's large model at T = 20 (each test runs in seconds on a shared core); BATCH_ATOL is the stated
tolerance of a batched job against the same job alone (workers.runtime.batching).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.errors import GenerationCanceled, SettingsError
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import Role
from tests.workers.runtime.together import together
from workers import metrics
from workers.bootstrap import pool_arguments
from workers.context import WorkerContext
from workers.runtime import DiffusionRuntime, GenerationResult
from workers.runtime.batch_loop import BatchLoop
from workers.runtime.batching import BATCH_ATOL, BatchMember, DenoisingBatch
from workers.runtime.denoising import DenoiseRun, new_scheduler

STEPS = 20
PROMPTS = (
    "a small red circle left of a blue square on a striped yellow background",
    "a big green triangle on a plain white background",
    "a blue square above a red circle on a dotted black background",
    "a yellow star right of a green circle on a plain grey background",
)


def _settings(data_dir: Path, max_batch: int) -> Settings:
    return load_settings(
        data_dir=data_dir,
        device="cpu",
        model_set="lab",
        steps=STEPS,
        capture_steps="5,10",
        max_batch=max_batch,
    )


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> DiffusionRuntime:
    return DiffusionRuntime(_settings(tmp_path_factory.mktemp("batched"), 4), Role.LARGE)


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> DiffusionRuntime:
    """The same model without batching: generate/resume run denoise() in the caller, one job at a time."""
    return DiffusionRuntime(_settings(tmp_path_factory.mktemp("alone"), 1), Role.LARGE)


def _params(index: int, guidance: float = 7.5) -> GenerationParams:
    prompt = PROMPTS[index % len(PROMPTS)]
    return GenerationParams(prompt=prompt, seed=index, steps=STEPS, width=64, height=64, guidance=guidance)


def _diff(first: Any, second: Any) -> float:
    return float(np.abs(first - second).max())


def test_jobs_run_by_threads_at_once_share_unet_calls_and_each_equals_its_run_alone(
    batched: DiffusionRuntime, alone: DiffusionRuntime
) -> None:
    assert batched.batching and not alone.batching
    source = alone.generate(_params(1), capture=[10])
    jobs: list[Callable[[], GenerationResult]] = [
        lambda: batched.generate(_params(0), capture=[5, 10]),
        lambda: batched.resume(_params(1), source.captured[10], 10, family=batched.family),
        lambda: batched.generate(_params(2, 1.0)),
        lambda: batched.refine(_params(3), source.final_latent, batched.family, 10),
    ]
    before = batched._loop.steps_run if batched._loop is not None else 0
    results = together(jobs)
    assert all(isinstance(result, GenerationResult) for result in results), results
    references = [
        alone.generate(_params(0), capture=[5, 10]),
        alone.resume(_params(1), source.captured[10], 10, family=alone.family),
        alone.generate(_params(2, 1.0)),
        alone.refine(_params(3), source.final_latent, alone.family, 10),
    ]
    for result, reference in zip(results, references, strict=True):
        assert isinstance(result, GenerationResult)
        assert _diff(result.final_latent, reference.final_latent) <= BATCH_ATOL
        assert (result.start_step, result.denoiser_evals) == (reference.start_step, reference.denoiser_evals)
        assert sorted(result.captured) == sorted(reference.captured)
    # A job that shared steps spent part of its wall time on the others' samples: its service time,
    # what pool controllers size the pools with, is its share; one run alone shares nothing.
    assert any(result.shared_s > 0 for result in results if isinstance(result, GenerationResult))
    for result in results:
        assert isinstance(result, GenerationResult) and 0 < result.service_s <= result.wall_s
    assert all(reference.shared_s == 0.0 for reference in references)
    loop = batched._loop
    assert loop is not None and loop.largest_batch >= 2
    # 20 + 10 + 20 + 10 steps in fewer UNet calls than steps: they were shared.
    assert loop.steps_run - before < 60
    assert not loop.busy  # the loop ended with its work


def test_a_resume_through_the_loop_alone_is_exact(batched: DiffusionRuntime, alone: DiffusionRuntime) -> None:
    full = alone.generate(_params(0), capture=[10])
    resumed = batched.resume(_params(0), full.captured[10], 10, family=batched.family)
    assert resumed.final_latent.tobytes() == full.final_latent.tobytes()


def test_a_job_canceled_mid_batch_ends_in_its_thread_and_leaves_the_others_unharmed(
    batched: DiffusionRuntime, alone: DiffusionRuntime
) -> None:
    asked: list[int] = []

    def stop_after_six() -> bool:
        asked.append(1)
        return len(asked) > 6

    results = together(
        [
            lambda: batched.generate(_params(0)),
            lambda: batched.generate(_params(3), should_stop=stop_after_six),
            lambda: batched.generate(_params(2, 1.0)),
        ]
    )
    assert isinstance(results[1], GenerationCanceled) and results[1].step == 6
    for result, index, guidance in ((results[0], 0, 7.5), (results[2], 2, 1.0)):
        assert isinstance(result, GenerationResult)
        assert _diff(result.final_latent, alone.generate(_params(index, guidance)).final_latent) <= BATCH_ATOL


class _BrokenUnet:
    """A UNet whose call fails, as one out of memory would."""

    def __call__(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("CUDA out of memory (a stand-in)")


def _member(seed: int) -> BatchMember:
    scheduler = new_scheduler(_ddim(), 4, start_step=0, device=torch.device("cpu"))
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(seed))
    return BatchMember(
        latents=latents,
        scheduler=scheduler,
        embeds=torch.zeros(1, 3, 8),
        guidance=1.0,
        steps=4,
        step=0,
        seed=seed,
    )


def _ddim() -> Any:
    import diffusers

    scheduler_class: Any = diffusers.DDIMScheduler
    return scheduler_class(num_train_timesteps=1000)


def test_a_failed_unet_call_fails_every_member_of_it_and_the_loop_goes_on() -> None:
    unets: list[Any] = [_BrokenUnet()]

    def new_batch() -> DenoisingBatch:
        return DenoisingBatch(unets[-1], max_batch=4, device=torch.device("cpu"))

    loop = BatchLoop(new_batch, role="large")
    members = [_member(seed) for seed in range(3)]
    results = together([lambda member=member: loop.run(member) for member in members])  # type: ignore[misc]
    assert all(isinstance(result, RuntimeError) and "out of memory" in str(result) for result in results)
    assert not loop.busy

    class Zeros:
        def __call__(self, sample: torch.Tensor, *_: Any, **__: Any) -> tuple[torch.Tensor]:
            return (torch.zeros_like(sample),)

    unets.append(Zeros())  # the next batch is made afresh, on the model hosted then
    run = loop.run(_member(7))
    assert run.latents.shape == (1, 4, 8, 8) and len(run.step_ms) == 4


def _within(call: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """call()'s result, failing (not hanging) when it does not come back: a loop that left its callers
    waiting would block the test forever."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert box, f"no result within {timeout_s:.0f}s: the loop left its callers waiting"
    return box[0]


class _Zeros:
    def __call__(self, sample: torch.Tensor, *_: Any, **__: Any) -> tuple[torch.Tensor]:
        return (torch.zeros_like(sample),)


def test_a_batch_that_cannot_be_made_fails_its_members_and_the_next_run_starts_a_new_loop() -> None:
    """Whatever stops the loop hands its members back: no task thread waits on a loop that is gone."""
    unreachable = threading.Event()  # the hosted model cannot be reached until the test says so
    unreachable.set()

    def new_batch() -> DenoisingBatch:
        if unreachable.is_set():
            raise OSError(27, "File too large")
        return DenoisingBatch(_Zeros(), max_batch=4, device=torch.device("cpu"))

    loop = BatchLoop(new_batch, role="large")
    calls = [lambda member=member: loop.run(member) for member in [_member(1), _member(2)]]
    results = _within(lambda: together(calls))  # type: ignore[arg-type]
    assert all(isinstance(result, OSError) for result in results), results
    assert not loop.busy
    unreachable.clear()
    assert _within(lambda: loop.run(_member(3))).latents.shape == (1, 4, 8, 8)


def test_a_telemetry_write_that_fails_does_not_stop_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """prometheus_client's multiprocess files grow as samples come: on a full disk an observation raises
    (EFBIG/ENOSPC). The step's members still finish, and so do later ones."""

    class FullDisk:
        def labels(self, **_: str) -> FullDisk:
            return self

        def observe(self, _: float) -> None:
            raise OSError(27, "File too large")

    monkeypatch.setattr(metrics, "BATCH_SIZE", FullDisk())
    loop = BatchLoop(lambda: DenoisingBatch(_Zeros(), max_batch=4, device=torch.device("cpu")), role="large")
    calls = [lambda member=member: loop.run(member) for member in [_member(1), _member(2)]]
    runs = _within(lambda: together(calls))  # type: ignore[arg-type]
    assert all(isinstance(run, DenoiseRun) and len(run.step_ms) == 4 for run in runs), runs
    assert loop.steps_run >= 4 and not loop.busy
    assert len(_within(lambda: loop.run(_member(3))).step_ms) == 4


def test_a_role_switch_waits_for_the_runs_in_flight_and_later_tasks_wait_for_it(tmp_path: Path) -> None:
    context = WorkerContext(load_settings(data_dir=tmp_path), Role.LARGE)  # no model built: a switch is cheap
    running = threading.Event()
    finish = threading.Event()
    order: list[str] = []

    def large_task() -> None:
        with context.hosting(Role.LARGE):
            running.set()
            finish.wait(5)
            order.append("large ended")

    def small_task() -> None:
        running.wait(5)
        with context.hosting(Role.SMALL):
            order.append(f"small ran as {context.role.value}")

    threads = [threading.Thread(target=large_task), threading.Thread(target=small_task)]
    for thread in threads:
        thread.start()
    running.wait(5)
    time.sleep(0.2)
    assert context.role is Role.LARGE and not order  # the small task waits for the large run
    finish.set()
    for thread in threads:
        thread.join(5)
    assert order == ["large ended", "small ran as small"]


def test_a_runtime_refuses_to_switch_models_while_its_batch_runs(batched: DiffusionRuntime) -> None:
    release = threading.Event()

    def stop() -> bool:
        release.wait(5)
        return False

    job = threading.Thread(target=lambda: batched.generate(_params(0), should_stop=stop))
    job.start()
    try:
        deadline = time.monotonic() + 5
        while not (batched._loop is not None and batched._loop.busy) and time.monotonic() < deadline:
            time.sleep(0.01)
        from core.errors import RoleMismatch

        with pytest.raises(RoleMismatch, match="while a batch of jobs runs"):
            batched.switch_role(Role.SMALL)
    finally:
        release.set()
        job.join(30)
    assert batched.role is Role.LARGE


def test_gpu_workers_and_decode_nodes_with_batching_run_max_batch_threads(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, max_batch=8)
    for role in (Role.LARGE, Role.SMALL, Role.DECODE):
        assert pool_arguments(role, settings, 1) == ["--pool=threads", "--concurrency=8"]
        assert pool_arguments(role, load_settings(data_dir=tmp_path, max_batch=1), 2) == [
            "--pool=prefork",
            "--concurrency=2",
        ]
    assert pool_arguments(Role.IO, settings, 1) == ["--pool=prefork", "--concurrency=1"]
    with pytest.raises(SettingsError, match="REPRISE_MAX_BATCH=8 runs its threads in one process"):
        pool_arguments(Role.LARGE, settings, 2)
