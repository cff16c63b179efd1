"""The GPU worker's loop of step-level batching on the device (workers.runtime.batch_loop): what a large
worker with REPRISE_MAX_BATCH > 1 does when its Celery threads each hand it a job at once.

    worker_loop   `threads` jobs started together from threads of their own on one runtime hosting the
                  large model with max_batch = threads: fresh generations (guidance 7.5 and 1.0), a
                  NIRVANA resume from a captured latent, and one job canceled after half its steps.
                  Each finished job is compared with the same job run alone on a runtime without
                  batching; the wall time of the jobs together is set against the same jobs run one
                  after another (images per second, both ways).

It passes when every job but the canceled one finishes within the batching's stated tolerance of its
run alone (workers.runtime.batching.within_batch_tolerance: BATCH_ATOL plus BATCH_ULPS units in the
last place of the stored dtype at the latent's largest magnitude; each job's largest difference and
whether it is bit for bit are kept), the canceled one ends with GenerationCanceled at its step and
harms none of the others, the jobs shared UNet calls (largest batch >= 2, fewer calls than steps) and
the loop ended idle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench.gpu.checks import Probe, hosted, max_abs_diff, same_bytes
from bench.gpu.report import Outcome, outcome
from core.errors import GenerationCanceled
from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime, GenerationResult
from workers.runtime.batching import BATCH_ATOL, BATCH_ULPS, within_batch_tolerance


def cancel_after(steps: int) -> int:
    """Steps the canceled job runs before its should_stop turns true: half of T."""
    return max(1, steps // 2)


Job = Callable[[DiffusionRuntime], GenerationResult]


def job_params(probe: Probe, index: int, guidance: float = 7.5) -> GenerationParams:
    """The index-th job's request: the probe's prompts in turn, a seed of its own."""
    prompt = probe.prompts[index % len(probe.prompts)]
    return GenerationParams(
        prompt=prompt,
        seed=probe.seed + index,
        steps=probe.steps,
        width=probe.size,
        height=probe.size,
        guidance=guidance,
    )


def _jobs(probe: Probe, threads: int, captured: GenerationResult, k: int) -> list[tuple[str, Job]]:
    """`threads` jobs: a resume from step k of job 0's run, a generation without guidance, the rest
    fresh generations, the last of them canceled mid-batch."""

    def params(index: int, guidance: float = 7.5) -> GenerationParams:
        return job_params(probe, index, guidance)

    resume_params, latent = params(0), captured.captured[k]
    jobs: list[tuple[str, Job]] = [
        ("resume", lambda runtime: runtime.resume(resume_params, latent, k, family=captured.family)),
        ("guidance-1", lambda runtime: runtime.generate(params(1, 1.0))),
    ]
    for index in range(2, threads - 1):
        jobs.append((f"generate-{index}", lambda runtime, index=index: runtime.generate(params(index))))  # type: ignore[misc]
    asked: list[int] = []
    lock = threading.Lock()

    def stop_after() -> bool:
        with lock:
            asked.append(1)
            return len(asked) > cancel_after(probe.steps)

    jobs.append(("canceled", lambda runtime: runtime.generate(params(threads), should_stop=stop_after)))
    return jobs


def _together(
    runtime: DiffusionRuntime, jobs: list[tuple[str, Job]]
) -> list[GenerationResult | BaseException]:
    """Every job from a thread of its own, started at one barrier, as a worker's task threads."""
    start = threading.Barrier(len(jobs))

    def run(job: Job) -> GenerationResult | BaseException:
        start.wait()
        try:
            return job(runtime)
        except Exception as error:  # each job's error comes back in its own thread
            return error

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(run, [job for _, job in jobs]))


def worker_loop_check(settings: Settings, probe: Probe, threads: int) -> Outcome:
    """`threads` jobs at once through the worker's BatchLoop against each run alone (module doc)."""
    if threads < 4:
        raise ValueError("the worker loop check needs at least 4 threads: a resume, no guidance, a cancel")
    k = probe.capture[-1]
    alone_settings = settings.model_copy(update={"max_batch": 1})
    with hosted(alone_settings, Role.LARGE) as alone:
        source = alone.generate(job_params(probe, 0), capture=[k])
        jobs = _jobs(probe, threads, source, k)
        runnable = jobs[:-1]  # the canceled job has no finished run to compare with
        alone.generate(job_params(probe, 1))  # warm the kernels before timing
        started = time.perf_counter()
        references = [job(alone) for _, job in runnable]
        alone_s = time.perf_counter() - started
    with hosted(settings.model_copy(update={"max_batch": threads}), Role.LARGE) as batched:
        batched.generate(job_params(probe, 1))  # the same warm-up on this runtime
        before = batched._loop.steps_run if batched._loop is not None else 0
        started = time.perf_counter()
        results = _together(batched, jobs)
        together_s = time.perf_counter() - started
        loop = batched._loop
        unet_calls = (loop.steps_run if loop is not None else 0) - before
        largest = loop.largest_batch if loop is not None else 0
        idle = loop is None or not loop.busy
    return _outcome(
        jobs,
        results,
        references,
        unet_calls=unet_calls,
        largest=largest,
        idle=idle,
        times=(alone_s, together_s),
        cancel_step=cancel_after(probe.steps),
    )


def _outcome(
    jobs: list[tuple[str, Job]],
    results: list[GenerationResult | BaseException],
    references: list[GenerationResult],
    *,
    unet_calls: int,
    largest: int,
    idle: bool,
    times: tuple[float, float],
    cancel_step: int,
) -> Outcome:
    names = [name for name, _ in jobs]
    errors = {
        name: repr(result)
        for name, result in zip(names[:-1], results[:-1], strict=True)
        if not isinstance(result, GenerationResult)
    }
    canceled = results[-1]
    canceled_ok = isinstance(canceled, GenerationCanceled) and canceled.step == cancel_step
    pairs = zip(results[:-1], references, strict=True)
    finished = [(result, ref) for result, ref in pairs if isinstance(result, GenerationResult)]
    diffs = [max_abs_diff(result.final_latent, ref.final_latent) for result, ref in finished]
    tolerated = all(within_batch_tolerance(result.final_latent, ref.final_latent) for result, ref in finished)
    exact = sum(same_bytes(result.final_latent, ref.final_latent) for result, ref in finished)
    steps = sum(sum(ref.denoiser_evals.values()) for ref in references) + cancel_step
    alone_s, together_s = times
    figures = {
        "threads": len(jobs),
        "jobs": names,
        "errors": errors,
        "canceled_at_step": canceled.step if isinstance(canceled, GenerationCanceled) else repr(canceled),
        "max_abs_diff": max(diffs, default=None),
        "max_abs_diff_by_job": dict(zip(names, diffs, strict=False)) if not errors else None,
        "within_tolerance": tolerated,
        "ulps": BATCH_ULPS,
        "bit_exact": exact,
        "atol": BATCH_ATOL,
        "unet_calls": unet_calls,
        "steps": steps,
        "largest_batch": largest,
        "alone_images_per_s": round(len(references) / alone_s, 3),
        "together_images_per_s": round(len(references) / together_s, 3),
        "speedup": round(alone_s / together_s, 3),
    }
    within = bool(finished) and not errors and tolerated
    passed = within and canceled_ok and largest >= 2 and unet_calls < steps and idle
    worst = max(diffs, default=float("nan"))
    detail = (
        f"{len(jobs)} threads: {len(finished)}/{len(references)} finished, max |batched - alone| "
        f"{worst:.3g} ({'within' if tolerated else 'NOT within'} atol {BATCH_ATOL:g} + {BATCH_ULPS} ulp "
        "of the latent's scale, "
        f"{exact} bit for bit), cancel at step "
        f"{figures['canceled_at_step']}, {unet_calls} UNet calls for {steps} steps (largest batch "
        f"{largest}); {figures['together_images_per_s']} images/s together against "
        f"{figures['alone_images_per_s']} alone ({figures['speedup']}x)"
    )
    return outcome("worker_loop", passed, detail, figures)
