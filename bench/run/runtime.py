"""`reprise bench runtime`: what one generation costs on the configured models.

Measures, on this machine and settings.device:
    large_step_ms   median wall time of one denoising step of the large model (one UNet
                    evaluation, a guidance batch of 2)
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
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import Role
from db.codec.latent import encode_latent
from db.images import ImageFormat, encode_image
from workers.runtime import DiffusionRuntime, GenerationResult

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

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def measure_runtime(settings: Settings, *, repeats: int = 3, decode_repeats: int = 10) -> RuntimeBench:
    """Run the benchmark on the configured models (tiny ones when none are configured).

    One untimed warm-up precedes each measurement. Generations use settings.steps,
    settings.capture_steps and the large model's native size. Roles are hosted one at a time,
    as a worker would, so peak memory is one model.
    """
    if repeats < 1 or decode_repeats < 1:
        raise ValueError("repeats and decode_repeats must be at least 1")
    capture = list(settings.capture_steps)  # settings guarantee each is in 1..T-1
    runtime = DiffusionRuntime(settings, Role.LARGE)
    size = runtime.native_size
    params = GenerationParams(prompt=BENCH_PROMPT, seed=0, steps=settings.steps, width=size, height=size)

    # Large model: full generations with capture, as a cache miss runs them.
    reference = runtime.generate(params, capture=capture, decode=True)  # the PNG size needs pixels
    large_steps = [ms for _ in range(repeats) for ms in runtime.generate(params, capture=capture).step_ms]
    final = reference.final_latent
    resume_exact = all(
        runtime.resume(params, reference.captured[k], k, family=runtime.family).final_latent.tobytes()
        == final.tobytes()
        for k in capture
    )
    family, large_name = runtime.family, runtime.model_name
    final_bytes, entry_bytes = _stored_bytes(reference)
    assert reference.image is not None  # generated with decode=True
    png_bytes = len(encode_image(reference.image, ImageFormat.PNG))

    # Small model: the same generation, timed per step.
    runtime.switch_role(Role.SMALL)
    small_name = runtime.model_name
    runtime.generate(params)
    small_steps = [ms for _ in range(repeats) for ms in runtime.generate(params).step_ms]

    # Decode role: the final latent back to pixels.
    runtime.switch_role(Role.DECODE)
    runtime.decode(final, family=family)
    decode_ms = [runtime.decode(final, family=family).wall_s * 1000.0 for _ in range(decode_repeats)]
    runtime.release()

    return RuntimeBench(
        large_step_ms=statistics.median(large_steps),
        small_step_ms=statistics.median(small_steps),
        decode_ms=statistics.median(decode_ms),
        codec_ratio=final.nbytes / final_bytes,
        entry_bytes=entry_bytes,
        png_bytes=png_bytes,
        resume_exact=resume_exact,
        large_model=large_name,
        small_model=small_name,
        family=family,
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        steps=settings.steps,
        capture_steps=capture,
        width=size,
        height=size,
        repeats=repeats,
    )


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
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
