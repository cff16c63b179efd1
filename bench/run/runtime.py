"""`reprise bench runtime`: what one generation costs on the configured models.

Measures, on this machine and settings.device:
    large_step_ms   median wall time of one denoising step of the large model (one UNet
                    evaluation, a guidance batch of 2); with a step cache (REPRISE_STEP_CACHE) the
                    mean over whole runs, full and reusing steps together: what the simulator prices
    small_step_ms   the same for the small model
    decode_ms       median wall time of one VAE decode of a final latent (decode role)
    codec_ratio     raw bytes / pcodec bytes of a final latent (db.codec)
    entry_bytes     bytes stored for one cache entry: every captured latent + the final one,
                    encoded as the cache stores them
    png_bytes       the same image as a PNG, for comparison (LatentBox 4.1: latents are smaller)
    resume_exact    resuming the prompt from each captured latent reproduced the final latent
                    bit for bit
These JSON field names are a contract (the simulator reads them as profiled costs); further
fields give the context of the measurement.

With batch sizes (`--batch 1,2,4,8,16`), step-level batching (workers.runtime.batching) on one
model (batch_model, the large one unless `--model small`): for each size n, n guided misses of
distinct seeds run their T steps in one batch, one UNet call per step:
    batch               {"n": {"images_per_s", "step_ms", "unet_ms", "max_abs_diff"}}: images
                        denoised per second (n over the median batch run's wall time), the median
                        step's and its UNet call's wall time, and the largest absolute difference
                        of a final latent from the same job run alone (DiffusionRuntime.generate)
    batch_max_abs_diff  the largest of those over every size
    batch_exact         every batched job equalled its run alone bit for bit
    batch_atol          the tolerance workers.runtime.batching states (BATCH_ATOL)
    batch_within_atol   batch_max_abs_diff <= batch_atol
    decode_batch        {"n": {"images_per_s", "decode_ms"}}: n latents decoded in one VAE call on
                        the decode role, as a decode node's threads share one (decode_batching)
    batch_operators_ms  with `--operators`, {"n": {"convolution", "linear", "attention", "other"}}:
                        a step's own time by operator class, from one more batch of each size run
                        under torch.profiler (bench.run.operators): where a batch's cost goes
Without sizes, batch, decode_batch and batch_operators_ms are {} and the other batch fields are null.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import torch

from bench.run.operators import operator_ms
from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import Role
from db.codec.latent import encode_latent
from db.images import ImageFormat, encode_image
from workers.runtime import DiffusionRuntime, GenerationResult, Latent
from workers.runtime.batching import BATCH_ATOL

BENCH_PROMPT = "a lighthouse on a rocky coast at sunset, oil painting"


@dataclass(frozen=True, slots=True)
class RuntimeBench:
    large_step_ms: float
    small_step_ms: float
    decode_ms: float
    codec_ratio: float
    entry_bytes: int
    png_bytes: int
    resume_exact: bool
    # context
    large_model: str
    small_model: str
    family: str
    device: str
    dtype: str
    steps: int
    capture_steps: list[int]
    width: int
    height: int
    repeats: int
    # step-level batching (empty / null without --batch)
    batch: dict[str, dict[str, float]] = field(default_factory=dict)
    batch_max_abs_diff: float | None = None
    batch_exact: bool | None = None
    batch_atol: float | None = None
    batch_within_atol: bool | None = None
    batch_model: str | None = None
    batch_operators_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    # the decode role's batched VAE decodes (workers.runtime.decode_batching), at the same sizes
    decode_batch: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BatchBench:
    """Step-level batching on one model: the `batch` block and its exactness (see the module doc)."""

    sizes: dict[str, dict[str, float]]
    max_abs_diff: float
    exact: bool
    model: str
    operators_ms: dict[str, dict[str, float]] = field(default_factory=dict)


def _step_price(settings: Settings, role: Role) -> Callable[[Sequence[float]], float]:
    """A step cache makes steps of two costs (full calls and reusing ones): a step's price is then their
    mean over whole runs, which a median would miss (it would be the cheap step's)."""
    return statistics.fmean if settings.step_cache_setting.for_role(role.value).on else statistics.median


def measure_runtime(
    settings: Settings,
    *,
    repeats: int = 3,
    decode_repeats: int = 10,
    batch_sizes: Sequence[int] = (),
    batch_role: Role = Role.LARGE,
    operators: bool = False,
) -> RuntimeBench:
    """Run the benchmark on the configured models (tiny ones when none are configured).

    One untimed warm-up precedes each measurement. Generations use settings.steps, settings.capture_steps
    and the large model's native size. Roles are hosted one at a time, as a worker would, so peak memory
    is one model. batch_role's model runs batch_sizes' batches, by operator class with `operators`."""
    if repeats < 1 or decode_repeats < 1:
        raise ValueError("repeats and decode_repeats must be at least 1")
    capture = list(settings.capture_steps)  # settings guarantee each is in 1..T-1
    runtime = DiffusionRuntime(settings, Role.LARGE)
    size = runtime.native_size
    params = GenerationParams(prompt=BENCH_PROMPT, seed=0, steps=settings.steps, width=size, height=size)

    def batched(role: Role) -> BatchBench | None:  # batch_role's model, while it is hosted
        sizes = batch_sizes if role is batch_role else ()
        return measure_batches(runtime, params, sizes, repeats=repeats, operators=operators)

    # Large model: full generations with capture, as a cache miss runs them; batches, when asked.
    large_steps, reference, resume_exact = _large_generations(runtime, params, capture, repeats)
    family, large_name, final = runtime.family, runtime.model_name, reference.final_latent
    final_bytes, entry_bytes = _stored_bytes(reference)
    batching = batched(Role.LARGE)

    # Small model: the same generation, timed per step; batches, when asked.
    runtime.switch_role(Role.SMALL)
    small_name = runtime.model_name
    runtime.generate(params)
    small_steps = [ms for _ in range(repeats) for ms in runtime.generate(params).step_ms]
    batching = batching or batched(Role.SMALL)

    # Decode role: the final latent back to pixels, alone and in batches of the sizes asked.
    runtime.switch_role(Role.DECODE)
    decode_ms, decode_batch = _decodes(runtime, final, family, batch_sizes, decode_repeats)
    runtime.release()

    return RuntimeBench(
        large_step_ms=_step_price(settings, Role.LARGE)(large_steps),
        small_step_ms=_step_price(settings, Role.SMALL)(small_steps),
        decode_ms=statistics.median(decode_ms),
        codec_ratio=final.nbytes / final_bytes,
        entry_bytes=entry_bytes,
        png_bytes=_png_bytes(reference),
        resume_exact=resume_exact,
        large_model=large_name,
        small_model=small_name,
        family=family,
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        **_setup(settings.steps, capture, size, repeats),
        **(_batch_fields(batching) if batching is not None else {}),
        decode_batch=decode_batch,
    )


def _setup(steps: int, capture: list[int], size: int, repeats: int) -> dict[str, Any]:
    """The report's context fields of the generations it timed."""
    return {"steps": steps, "capture_steps": capture, "width": size, "height": size, "repeats": repeats}


def _large_generations(
    runtime: DiffusionRuntime, params: GenerationParams, capture: list[int], repeats: int
) -> tuple[list[float], GenerationResult, bool]:
    """Step times of `repeats` generations with capture; the reference run (decoded: the PNG size
    needs pixels); whether resuming from each captured latent reproduced its final latent bit for bit."""
    reference = runtime.generate(params, capture=capture, decode=True)
    steps = [ms for _ in range(repeats) for ms in runtime.generate(params, capture=capture).step_ms]
    final, family = reference.final_latent.tobytes(), runtime.family
    resume_exact = all(
        runtime.resume(params, reference.captured[k], k, family=family).final_latent.tobytes() == final
        for k in capture
    )
    return steps, reference, resume_exact


def measure_batches(
    runtime: DiffusionRuntime,
    params: GenerationParams,
    sizes: Sequence[int],
    *,
    repeats: int,
    operators: bool = False,
) -> BatchBench | None:
    """Batches of each size on the hosted model: n misses (params with seeds 0..n-1) in one batch.

    Each job of the largest batch is first run alone (generate), the reference every batch's final
    latents are compared with; each size runs once untimed, then `repeats` times timed, the sizes
    taking turns so that load from other processes falls on every size alike.
    """
    if not sizes:
        return None
    if min(sizes) < 1:
        raise ValueError(f"batch sizes must be at least 1, got {list(sizes)}")
    jobs = [replace(params, seed=seed) for seed in range(max(sizes))]
    alone = [runtime.generate(job).final_latent for job in jobs]
    ordered = sorted(set(sizes))
    for size in ordered:  # warm-up
        _run_batch(runtime, jobs[:size])
    rounds = [[_run_batch(runtime, jobs[:size]) for size in ordered] for _ in range(repeats)]
    table: dict[str, dict[str, float]] = {}
    exact, largest = True, 0.0
    for column, size in enumerate(ordered):
        runs = [row[column] for row in rounds]
        pairs = [(result.final_latent, alone[i]) for i, result in enumerate(runs[-1].results)]
        diffs = [float(np.abs(final - reference).max()) for final, reference in pairs]
        exact = exact and all(final.tobytes() == reference.tobytes() for final, reference in pairs)
        largest = max(largest, *diffs)
        table[str(size)] = {
            "images_per_s": size / statistics.median(run.wall_s for run in runs),
            "step_ms": statistics.median(ms for run in runs for ms in run.step_ms),
            "unet_ms": statistics.median(ms for run in runs for ms in run.unet_ms),
            "max_abs_diff": max(diffs),
        }
    profiled = {
        str(size): operator_ms(partial(_steps_run, runtime, jobs[:size]), runtime.device)
        for size in (ordered if operators else [])
    }
    return BatchBench(table, largest, exact, runtime.model_name, operators_ms=profiled)


@dataclass(frozen=True, slots=True)
class _BatchRun:
    results: list[GenerationResult]
    wall_s: float  # every step of the batch, from the first to the last
    step_ms: list[float]
    unet_ms: list[float]


def _run_batch(runtime: DiffusionRuntime, jobs: Sequence[GenerationParams]) -> _BatchRun:
    """`jobs` admitted together to one batch and stepped to the end."""
    batch = runtime.new_batch(max_batch=len(jobs))
    members = [runtime.generation_member(job) for job in jobs]
    for member in members:
        batch.admit(member)
    started, steps = time.perf_counter(), []
    while len(batch):
        steps.append(batch.step())
    wall_s = time.perf_counter() - started
    return _BatchRun(
        results=[runtime.batch_result(member) for member in members],
        wall_s=wall_s,
        step_ms=[step.ms for step in steps],
        unet_ms=[step.unet_ms for step in steps],
    )


def _steps_run(runtime: DiffusionRuntime, jobs: Sequence[GenerationParams]) -> int:
    """Steps of `jobs` batched to the end (what operator_ms divides its times by)."""
    return len(_run_batch(runtime, jobs).step_ms)


def _batch_fields(batching: BatchBench) -> dict[str, Any]:
    return {
        "batch": batching.sizes,
        "batch_max_abs_diff": batching.max_abs_diff,
        "batch_exact": batching.exact,
        "batch_atol": BATCH_ATOL,
        "batch_within_atol": batching.max_abs_diff <= BATCH_ATOL,
        "batch_model": batching.model,
        "batch_operators_ms": batching.operators_ms,
    }


def _decodes(
    runtime: DiffusionRuntime, final: Latent, family: str, sizes: Sequence[int], repeats: int
) -> tuple[list[float], dict[str, dict[str, float]]]:
    """The decode role's milliseconds per decode, and its `decode_batch` block."""
    runtime.decode(final, family=family)  # warm-up
    alone = [runtime.decode(final, family=family).wall_s * 1000.0 for _ in range(repeats)]
    return alone, _decode_batches(runtime, final, family, sizes, repeats)


def _decode_batches(
    runtime: DiffusionRuntime, final: Latent, family: str, sizes: Sequence[int], repeats: int
) -> dict[str, dict[str, float]]:
    """For each size n, n copies of the final latent decoded in one VAE call (what a decode node's
    threads share): images per second and the call's median milliseconds."""
    latent = torch.from_numpy(final).unsqueeze(0).to(runtime.device, runtime.dtype)
    block: dict[str, dict[str, float]] = {}
    for size in sorted(set(sizes)):
        runtime.decode_many([latent] * size, family)  # warm-up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            runtime.decode_many([latent] * size, family)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        block[str(size)] = {"images_per_s": size / median, "decode_ms": median * 1e3}
    return block


def _png_bytes(reference: GenerationResult) -> int:
    assert reference.image is not None  # generated with decode=True
    return len(encode_image(reference.image, ImageFormat.PNG))


def _stored_bytes(reference: GenerationResult) -> tuple[int, int]:
    """Bytes of the encoded final latent, and of the whole cache entry (every captured latent too)."""
    family = reference.family
    final_bytes = len(encode_latent(reference.final_latent, family=family, k=None))
    return final_bytes, final_bytes + sum(
        len(encode_latent(latent, family=family, k=k)) for k, latent in reference.captured.items()
    )


def format_table(report: RuntimeBench) -> str:
    """The report as aligned `name  value` lines for a terminal."""
    rows = [
        ("large_step_ms", f"{report.large_step_ms:.2f}  ({report.large_model})"),
        ("small_step_ms", f"{report.small_step_ms:.2f}  ({report.small_model})"),
        ("large/small step", f"{report.large_step_ms / report.small_step_ms:.2f}x"),
        ("decode_ms", f"{report.decode_ms:.2f}"),
        ("codec_ratio", f"{report.codec_ratio:.3f}"),
        ("entry_bytes", f"{report.entry_bytes}  ({len(report.capture_steps)} captured + final)"),
        ("png_bytes", str(report.png_bytes)),
        ("resume_exact", str(report.resume_exact).lower()),
        (
            "setup",
            f"{report.device} {report.dtype}, T={report.steps}, {report.width}x{report.height}, "
            f"family {report.family}",
        ),
    ]
    for size, row in report.batch.items():
        speedup = row["images_per_s"] / report.batch[min(report.batch, key=int)]["images_per_s"]
        rows.append(
            (
                f"batch {size}",
                f"{row['images_per_s']:.2f} images/s ({speedup:.2f}x), step {row['step_ms']:.2f} ms, "
                f"UNet {row['unet_ms']:.2f} ms, max |diff| {row['max_abs_diff']:.2e}",
            )
        )
    for size, classes in report.batch_operators_ms.items():
        spent = ", ".join(f"{name} {ms:.2f}" for name, ms in classes.items())
        rows.append((f"batch {size} by operator", f"{spent} ms a step"))
    if report.batch:
        rows.append(
            (
                "batch exactness",
                f"{report.batch_model}: max |batched - alone| {report.batch_max_abs_diff:.2e}, "
                f"bit for bit {str(report.batch_exact).lower()}, within {report.batch_atol:g} "
                f"{str(report.batch_within_atol).lower()}",
            )
        )
    for size, row in report.decode_batch.items():
        speedup = row["images_per_s"] / report.decode_batch[min(report.decode_batch, key=int)]["images_per_s"]
        rows.append((f"decode batch {size}", f"{row['images_per_s']:.2f} images/s ({speedup:.2f}x)"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
