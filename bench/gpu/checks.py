"""The runtime's operations on the lab's models, each checked against its contract on one device and
dtype (workers.runtime.runtime.DiffusionRuntime). Every check hosts the role it needs in a runtime of
its own and releases it, as the workers of a pool do, so a resume is checked on a runtime other than
the one that captured the latent:

    generate             each prompt for T steps, capturing every k of K: the captures asked for, finite
                         latents in the compute dtype, T evaluations, an image that is not flat
    resume               from each captured latent, T - k steps end on the uninterrupted run's final
                         latent bit for bit (else the largest difference); a repeated run is identical
    refine               MoDM on the small model of the same family: the large model's final latent
                         noised to step k and denoised in T - k evaluations, repeatable bit for bit
    refine_cross_family  the same on small-b (family lab-b): decoded by lab-a's VAE, encoded by lab-b's
    decode               the decode role's VAE turns each final latent into generate's image, pixel
                         for pixel
    reference            the same generations in float32 on the CPU: how far the device's run drifts
                         (latents, pixels), and whether the lab's judge reads the same scenes in both
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from PIL import Image

from bench.gpu.report import Outcome, outcome
from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime, GenerationResult

# A flat image (all pixels alike, as NaN latents decode) has a pixel standard deviation of about 0.
FLAT_PIXEL_STD: Final = 1.0
# How much lower the judge may score the device's images than the CPU's float32 ones (a share of the
# prompts' attributes, averaged over the prompts): one attribute of one of four prompts is 1/36 to 1/24.
JUDGE_TOLERANCE: Final = 0.1

Generated = dict[str, GenerationResult]
"""Each prompt's run on the large model, with its captured latents and decoded image."""
Scorer = Callable[[Sequence[Image.Image], Sequence[str]], list[float | None]]


@dataclass(frozen=True, slots=True)
class Probe:
    """What every check runs: the prompts (scenes of the lab's world), T, the captured steps K, the
    side in pixels, the seed and the k that refine starts from."""

    prompts: tuple[str, ...]
    steps: int
    capture: tuple[int, ...]
    size: int
    seed: int
    refine_k: int

    def params(self, prompt: str) -> GenerationParams:
        return GenerationParams(
            prompt=prompt, seed=self.seed, steps=self.steps, width=self.size, height=self.size
        )


@contextmanager
def hosted(settings: Settings, role: Role) -> Iterator[DiffusionRuntime]:
    """A runtime hosting `role`'s model, released on the way out."""
    runtime = DiffusionRuntime(settings, role)
    try:
        yield runtime
    finally:
        runtime.release()


def generate_check(settings: Settings, probe: Probe, into: Generated) -> Outcome:
    """Generate every prompt with capture and decode on the large model; the runs go into `into`."""
    with hosted(settings, Role.LARGE) as runtime:
        for prompt in probe.prompts:
            into[prompt] = runtime.generate(probe.params(prompt), capture=probe.capture, decode=True)
        dtype = str(runtime.dtype).removeprefix("torch.")
    runs = list(into.values())
    latents = [run.final_latent for run in runs] + [
        latent for run in runs for latent in run.captured.values()
    ]
    finite = all(bool(np.isfinite(latent).all()) for latent in latents)
    in_dtype = all(latent.dtype == np.dtype(dtype) for latent in latents)
    captured = all(sorted(run.captured) == list(probe.capture) for run in runs)
    evaluations = all(sum(run.denoiser_evals.values()) == probe.steps for run in runs)
    flat = [
        prompt for prompt, run in into.items() if run.image is None or pixel_std(run.image) < FLAT_PIXEL_STD
    ]
    steps = [ms for run in runs for ms in run.step_ms]
    figures = {
        "images": len(runs),
        "latent_dtype": str(runs[0].final_latent.dtype),
        "latent_shape": list(runs[0].final_latent.shape),
        "finite": finite,
        "captured_as_asked": captured,
        "evaluations_per_image": probe.steps,
        "flat_images": flat,
        "step_ms_median": _round(statistics.median(steps)),
        "step_ms_max": _round(max(steps)),
        "image_s_median": _round(statistics.median(run.wall_s for run in runs), 4),
    }
    passed = finite and in_dtype and captured and evaluations and not flat
    detail = (
        f"{len(runs)} images, T={probe.steps}, captured k={list(probe.capture)}, {figures['latent_dtype']} "
        f"latents {'finite' if finite else 'NOT finite'}, median step {figures['step_ms_median']} ms"
    )
    return outcome("generate", passed, detail + (f"; flat images: {len(flat)}" if flat else ""), figures)


def resume_check(settings: Settings, probe: Probe, generated: Generated) -> Outcome:
    """Resume every captured latent on a runtime of its own and compare the final latents."""
    by_k: dict[int, float] = {}
    exact = total = 0
    with hosted(settings, Role.LARGE) as runtime:
        for prompt, run in generated.items():
            for k in probe.capture:
                resumed = runtime.resume(probe.params(prompt), run.captured[k], k, family=run.family)
                total += 1
                exact += same_bytes(resumed.final_latent, run.final_latent)
                by_k[k] = max(by_k.get(k, 0.0), max_abs_diff(resumed.final_latent, run.final_latent))
        first = probe.prompts[0]
        again = runtime.generate(probe.params(first), capture=probe.capture)
    reference = generated[first]
    repeat_exact = same_bytes(again.final_latent, reference.final_latent) and all(
        same_bytes(again.captured[k], reference.captured[k]) for k in probe.capture
    )
    worst = max(by_k.values(), default=0.0)
    figures = {
        "resumes": total,
        "bit_exact": exact,
        "max_abs_diff": worst,
        "max_abs_diff_by_k": {str(k): diff for k, diff in sorted(by_k.items())},
        "repeat_exact": repeat_exact,
    }
    detail = f"{exact}/{total} resumes bit for bit (max |diff| {worst:.3g}); a repeated run " + (
        "is identical" if repeat_exact else "DIFFERS"
    )
    return outcome("resume", exact == total and repeat_exact, detail, figures)


def refine_check(settings: Settings, probe: Probe, generated: Generated, *, name: str) -> Outcome:
    """Refine each large-model final latent on the small model `settings` names, from probe.refine_k."""
    k = probe.refine_k
    with hosted(settings, Role.SMALL) as runtime:
        crossing = runtime.family != next(iter(generated.values())).family
        runs = {
            prompt: runtime.refine(probe.params(prompt), run.final_latent, run.family, k, decode=True)
            for prompt, run in generated.items()
        }
        first = probe.prompts[0]
        source = generated[first]
        again = runtime.refine(probe.params(first), source.final_latent, source.family, k, decode=True)
        model, family = runtime.model_name, runtime.family
    finite = all(bool(np.isfinite(run.final_latent).all()) for run in runs.values())
    evaluations = all(run.denoiser_evals == {model: probe.steps - k} for run in runs.values())
    decodes = all(run.vae_decodes == 1 + int(crossing) for run in runs.values())
    flat = [p for p, run in runs.items() if run.image is None or pixel_std(run.image) < FLAT_PIXEL_STD]
    repeat_exact = same_bytes(again.final_latent, runs[first].final_latent)
    steps = [ms for run in runs.values() for ms in run.step_ms]
    change = [pixel_diff(run.image, generated[p].image) for p, run in runs.items()]
    figures = {
        "model": model,
        "family": family,
        "from_family": source.family,
        "k": k,
        "evaluations_per_image": probe.steps - k,
        "vae_decodes_per_image": 1 + int(crossing),
        "finite": finite,
        "flat_images": flat,
        "repeat_exact": repeat_exact,
        "step_ms_median": _round(statistics.median(steps)) if steps else None,
        "mean_abs_pixel_change": _round(statistics.mean(diff["mean"] for diff in change)),
    }
    passed = finite and evaluations and decodes and repeat_exact and not flat
    detail = (
        f"{len(runs)} images on {model} ({source.family} -> {family}) from k={k}: {probe.steps - k} "
        f"evaluations each, {'repeatable' if repeat_exact else 'NOT repeatable'}, "
        f"latents {'finite' if finite else 'NOT finite'}"
    )
    return outcome(name, passed, detail, figures)


def decode_check(settings: Settings, generated: Generated) -> Outcome:
    """Decode every final latent on the decode role and compare with the image generate decoded."""
    with hosted(settings, Role.DECODE) as runtime:
        decoded = {
            prompt: runtime.decode(run.final_latent, family=run.family) for prompt, run in generated.items()
        }
    diffs = [pixel_diff(decoded[prompt].image, run.image) for prompt, run in generated.items()]
    identical = sum(diff["max"] == 0 for diff in diffs)
    figures = {
        "images": len(diffs),
        "identical": identical,
        "max_abs_pixel_diff": max(diff["max"] for diff in diffs),
        "decode_ms_median": _round(statistics.median(result.wall_s * 1e3 for result in decoded.values())),
    }
    detail = f"{identical}/{len(diffs)} decodes equal generate's image pixel for pixel"
    return outcome("decode", identical == len(diffs), detail, figures)


def reference_check(cpu: Settings, probe: Probe, generated: Generated, judge: Scorer | None) -> Outcome:
    """Generate the prompts again in float32 on the CPU and compare; the judge scores both sets."""
    with hosted(cpu, Role.LARGE) as runtime:
        reference = {prompt: runtime.generate(probe.params(prompt), decode=True) for prompt in generated}
    same_run = all(
        ref.final_latent.dtype == run.final_latent.dtype for ref, run in _pairs(reference, generated)
    )
    latent = [max_abs_diff(run.final_latent, ref.final_latent) for ref, run in _pairs(reference, generated)]
    pixels = [pixel_diff(run.image, ref.image) for ref, run in _pairs(reference, generated)]
    figures: dict[str, Any] = {
        "latent_max_abs_diff": max(latent),
        "pixel_max_abs_diff": max(diff["max"] for diff in pixels),
        "pixel_mean_abs_diff": _round(statistics.mean(diff["mean"] for diff in pixels)),
        "psnr_db_min": _min_psnr(pixels),
    }
    passed = True
    if same_run:  # the CPU run checked against itself: float32 on both sides must agree exactly
        passed = max(latent) == 0.0
        detail = f"float32 on the CPU twice: max |latent diff| {max(latent):.3g} (must be 0)"
    else:
        psnr = figures["psnr_db_min"]
        detail = f"against float32 on the CPU: max |latent diff| {max(latent):.3g}, min PSNR {psnr} dB"
    if judge is None:
        figures["judge"] = "unavailable: the lab's judge is refused (see reprise lab judge)"
    else:
        prompts = list(generated)
        device_scores = judge([_image(generated[p]) for p in prompts], prompts)
        cpu_scores = judge([_image(reference[p]) for p in prompts], prompts)
        device_mean, cpu_mean = _mean_score(device_scores), _mean_score(cpu_scores)
        figures |= {"judge_device": device_scores, "judge_cpu": cpu_scores}
        passed = passed and device_mean >= cpu_mean - JUDGE_TOLERANCE
        detail += f"; judge {device_mean:.3f} here against {cpu_mean:.3f} on the CPU"
    return outcome("reference", passed, detail, figures)


def same_bytes(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> bool:
    return first.dtype == second.dtype and first.shape == second.shape and first.tobytes() == second.tobytes()


def max_abs_diff(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> float:
    return float(np.abs(first.astype(np.float64) - second.astype(np.float64)).max())


def pixel_std(image: Image.Image) -> float:
    return float(np.asarray(image, dtype=np.float64).std())


def pixel_diff(first: Image.Image | None, second: Image.Image | None) -> dict[str, float]:
    """The largest and mean absolute difference of two 8-bit images, and their mean squared error."""
    if first is None or second is None:
        raise ValueError("both images are needed: generate with decode=True")
    delta = np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
    return {
        "max": float(np.abs(delta).max()),
        "mean": float(np.abs(delta).mean()),
        "mse": float((delta**2).mean()),
    }


def _min_psnr(diffs: Sequence[dict[str, float]]) -> float | None:
    """The lowest PSNR in dB over the pairs; None when every pair is identical (infinite PSNR)."""
    worst = max(diff["mse"] for diff in diffs)
    return None if worst == 0 else round(10 * math.log10(255.0**2 / worst), 2)


def _pairs(reference: Generated, generated: Generated) -> list[tuple[GenerationResult, GenerationResult]]:
    return [(reference[prompt], run) for prompt, run in generated.items()]


def _image(run: GenerationResult) -> Image.Image:
    if run.image is None:
        raise ValueError("the run was not decoded")
    return run.image


def _mean_score(scores: Sequence[float | None]) -> float:
    judged = [score for score in scores if score is not None]
    return statistics.mean(judged) if judged else 0.0


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)
