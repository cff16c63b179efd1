"""The video runtime (FlexCache): one process's text-to-video pipeline (VideoRuntime), loaded once, and
the operations a video job runs on it: a full generation with capture (a miss), a resume from a cached
or stitched state (a hit), and the frames of a final latent as an animated WebP.

VideoRuntime mirrors DiffusionRuntime minimally: settings.device ('auto': CUDA when present), float16
on CUDA and float32 on a CPU (workers.runtime.loading), and results as GenerationResult, so the task
bodies count evaluations, store latents and report metrics as they do for images. Not thread-safe: a
GPU worker runs one job at a time.

The loop is workers.runtime.denoising.denoise, unchanged: a video latent is (1, C, F, H/8, W/8)
and every operation of the loop (the guidance batch on axis 0, scale_model_input, the UNet call,
the scheduler step) is shape-agnostic, so cancellation, progress, capture and evaluation counts
behave exactly as for images. A captured latent is (C, F, h, w); resuming from step k with it
(NIRVANA, FlexCache 2.2) reproduces the full run under DDIM with eta=0.

Supported pipelines: diffusers' `TextToVideoSDPipeline` layout (vae, text_encoder, tokenizer, a
`UNet3DConditionModel` unet, scheduler), e.g. "ali-vilab/text-to-video-ms-1.7b" or the tiny one
(workers.runtime.tiny).
"""

from __future__ import annotations

import io
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image

from core import plugins
from core.errors import LatentError, SettingsError, StepsError
from core.params import Limits, VideoParams, check_video_params
from core.settings import Settings
from core.vocabulary import BUILTIN_VIDEO_MODELS, ModelSet, Role
from workers import metrics
from workers.runtime.denoising import (
    OnStep,
    ShouldStop,
    denoise,
    encode_prompt,
    new_scheduler,
    scheduler_template,
)
from workers.runtime.latents import to_numpy, vae_decode
from workers.runtime.loading import compute_dtype, ready_for_denoising, resolve_device
from workers.runtime.results import GenerationResult, Latent
from workers.runtime.tiny import TINY_VIDEO_FAMILY, ensure_tiny_video_model

CAPTURE_STEPS = frozenset({5, 10, 15, 20, 25})
"""NIRVANA's key steps of T = 50, which FlexCache keeps per video (2.2, 3.2)."""

DECODE_BATCH = 8
"""Frames per VAE decoder pass: bounds the decoder's memory at a real model's size (a 320x512
frame's activations are ~100x its latent's); the tiny model decodes 8 frames in one pass."""

WEBP_QUALITY = 90

Frames = npt.NDArray[np.uint8]
"""A video's frames, (F, H, W, 3) uint8 RGB."""


@dataclass(frozen=True, slots=True)
class VideoRun:
    """The outcome of generate_video.

    final_latent: the latent after step T, (C, F, h, w) in the compute dtype. captured: step k ->
    the latent after k steps, (C, F, h, w). evaluations: UNet evaluations run (T - start_step; a
    guidance batch counts as one). step_ms: each step's wall time, in order.
    """

    final_latent: Latent
    captured: dict[int, Latent]
    steps: int
    start_step: int
    evaluations: int
    step_ms: tuple[float, ...]


LAB_VIDEO_MODEL = BUILTIN_VIDEO_MODELS[ModelSet.LAB]
"""The quality lab's trained text-to-video model (lab.video.training), assembled from the committed
weights like the lab's image models; the lab registers it (core.plugins)."""


def video_model_source(settings: Settings) -> str:
    """What `from_pretrained` reads for settings.video_model_name: the tiny model's directory (built offline
    under settings.tiny_models_dir on first use) for 'tiny-video', the lab's assembled pipeline for
    'lab:video' (the model source the lab registers), else the id or directory as given."""
    if settings.video_model_name == TINY_VIDEO_FAMILY:
        return str(ensure_tiny_video_model(Path(settings.tiny_models_dir)))
    if settings.video_model_name == LAB_VIDEO_MODEL:
        return str(plugins.model_path(settings, LAB_VIDEO_MODEL))
    return settings.video_model_name


class VideoRuntime:
    """Hosts settings.video_model_name. `family`: its latents' family (settings.video_family), the key of the
    video entries it may resume; `model_name`: the key of denoiser_evals."""

    def __init__(self, settings: Settings) -> None:
        self.device = resolve_device(settings.device)
        self.dtype = compute_dtype(self.device)
        self.family = settings.video_family
        self.model_name = settings.video_model_name
        with metrics.timed(metrics.MODEL_LOAD_SECONDS, role="video"):
            self._pipe: Any = load_video_pipeline(
                video_model_source(settings), device=self.device, dtype=self.dtype
            )

    def generate(
        self,
        params: VideoParams,
        *,
        capture: Collection[int] = (),
        should_stop: ShouldStop | None = None,
        on_step: OnStep | None = None,
        role: Role = Role.LARGE,
    ) -> GenerationResult:
        """All T = params.steps steps from seeded noise, keeping the latent after each step in
        `capture` (each in 1..T-1). Raises InvalidInput subclasses for bad params (before any model
        work) and GenerationCanceled when should_stop() turns true. `role`: the pool that ran it."""
        started = time.perf_counter()
        run = generate_video(self._pipe, params, capture=capture, should_stop=should_stop, on_step=on_step)
        return self._result(run, role, started)

    def resume(
        self,
        params: VideoParams,
        latent: Latent,
        k: int,
        *,
        capture: Collection[int] = (),
        should_stop: ShouldStop | None = None,
        on_step: OnStep | None = None,
        role: Role = Role.LARGE,
    ) -> GenerationResult:
        """Steps k..T-1 from `latent`, the (C, F, h, w) latent after step k of a run of this family and
        schedule (a cached state, or two stitched: FlexCache 4.2.2), keeping those in `capture` (each
        in k+1..T-1): T - k evaluations. Raises as generate, LatentError for a latent of another shape."""
        started = time.perf_counter()
        run = generate_video(
            self._pipe,
            params,
            start_latent=latent,
            start_step=k,
            capture=capture,
            should_stop=should_stop,
            on_step=on_step,
        )
        return self._result(run, role, started)

    def to_webp(self, final_latent: Latent, fps: int, *, frames: Frames | None = None) -> tuple[bytes, int]:
        """The video of a final (C, F, h, w) latent: its VAE-decoded frames (`frames`, when decoded
        already) as an animated WebP at `fps`, and the number of frames."""
        frames = self.frames(final_latent) if frames is None else frames
        return encode_webp(frames, fps), len(frames)

    def frames(self, final_latent: Latent) -> Frames:
        """A final (C, F, h, w) latent's frames, VAE-decoded: (F, H, W, 3) uint8."""
        return decode_frames(self._pipe, final_latent)

    def _result(self, run: VideoRun, role: Role, started: float) -> GenerationResult:
        metrics.observe_steps(role.value, self.model_name, run.step_ms, device=self.device)
        return GenerationResult(
            image=None,
            final_latent=run.final_latent,
            captured=run.captured,
            family=self.family,
            model=self.model_name,
            role=role,
            steps=run.steps,
            start_step=run.start_step,
            denoiser_evals={self.model_name: run.evaluations},
            step_ms=run.step_ms,
            wall_s=time.perf_counter() - started,
        )


def load_video_pipeline(source: str, *, device: torch.device, dtype: torch.dtype) -> Any:
    """Load a text-to-video pipeline from a Hugging Face id or a directory (`from_pretrained`,
    as load_pipeline does for images); refuse one whose UNet is not a UNet3DConditionModel."""
    diffusers = _diffusers()
    pipe = diffusers.TextToVideoSDPipeline.from_pretrained(source, dtype=dtype)
    if not isinstance(pipe.unet, diffusers.UNet3DConditionModel):
        raise SettingsError(
            f"model {source} has a {type(pipe.unet).__name__}: video jobs need a UNet3DConditionModel "
            "(the TextToVideoSDPipeline layout)"
        )
    return ready_for_denoising(pipe, device=device, dtype=dtype)


def generate_video(
    pipe: Any,
    params: VideoParams,
    *,
    start_latent: Latent | torch.Tensor | None = None,
    start_step: int = 0,
    capture: Collection[int] | None = None,
    should_stop: ShouldStop | None = None,
    on_step: OnStep | None = None,
) -> VideoRun:
    """Run schedule steps start_step..T-1 from seeded noise (start_step 0) or from `start_latent`,
    the latent captured after step start_step of a run with the same T and scheduler (1..T-1).

    capture: the steps k after which to keep the latent, each in start_step+1..T-1; None takes
    CAPTURE_STEPS within that range. Raises InvalidInput subclasses for bad params, steps or
    latents (before any model work) and GenerationCanceled when should_stop() turns true.
    """
    # 1. Check inputs
    scale = int(pipe.vae_scale_factor)
    check_video_params(params, Limits(vae_scale_factor=scale))
    capture_steps = _capture_steps(capture, start_step, params.steps)
    device, dtype = pipe.device, pipe.unet.dtype
    channels = int(pipe.unet.config.in_channels)
    expected = (channels, params.frames, params.height // scale, params.width // scale)
    start = _start_latent(start_latent, start_step, params.steps, expected)
    template = scheduler_template(pipe.scheduler, None)
    with torch.inference_mode():
        # 2. Encode the prompt
        embeds, guided = encode_prompt(pipe, params, device)
        # 3. Schedule, and the latent the run starts from
        scheduler = new_scheduler(template, params.steps, start_step=start_step, device=device)
        if start is None:
            latents = seeded_video_noise(params, channels, scale=scale, device=device, dtype=dtype)
            latents = latents * scheduler.init_noise_sigma
        else:
            latents = start.unsqueeze(0).to(device, dtype)
        # 4. Denoise
        run = denoise(
            pipe,
            scheduler,
            latents,
            embeds,
            guided,
            params,
            start_step,
            capture_steps,
            should_stop,
            device=device,
            on_step=on_step,
        )
    return VideoRun(
        final_latent=to_numpy(run.latents),
        captured=run.captured,
        steps=params.steps,
        start_step=start_step,
        evaluations=len(run.step_ms),
        step_ms=tuple(run.step_ms),
    )


def seeded_video_noise(
    params: VideoParams, channels: int, *, scale: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Seeded Gaussian noise (1, C, F, H/scale, W/scale), drawn on the CPU so a seed gives the
    same noise on every device (as denoising.seeded_noise for images).

    With `params.noise_window` W, FreeNoise's noise rescheduling (Qiu et al. 2024, which FlexCache 5
    runs VideoCrafter2 with for 64 frames): the first W frames' noise is drawn, and every later
    window of W frames is a seeded shuffle of it, so distant frames share noise (long-range
    content stays consistent, and frames repeat: what intra-step compression removes, 4.1.1)."""
    generator = torch.Generator("cpu").manual_seed(params.seed)
    window = params.frames if params.noise_window is None else params.noise_window
    shape = (1, channels, window, params.height // scale, params.width // scale)
    base = torch.randn(shape, generator=generator, dtype=torch.float32)
    windows = [base]
    for start in range(window, params.frames, window):
        order = torch.randperm(window, generator=generator)
        windows.append(base[:, :, order][:, :, : params.frames - start])
    return torch.cat(windows, dim=2).to(device, dtype)


def _capture_steps(capture: Collection[int] | None, start_step: int, steps: int) -> set[int]:
    """The steps to capture: CAPTURE_STEPS that the run reaches, or the caller's, each checked."""
    if capture is None:
        return {k for k in CAPTURE_STEPS if start_step < k < steps}
    for k in capture:
        if not start_step < k < steps:
            raise StepsError(
                f"capture step {k} must be in {start_step + 1}..{steps - 1} for a run of steps "
                f"{start_step}..{steps - 1}",
                field="capture",
            )
    return set(capture)


def _start_latent(
    latent: Latent | torch.Tensor | None, start_step: int, steps: int, expected: tuple[int, ...]
) -> torch.Tensor | None:
    """The caller's start latent as a CPU tensor (C, F, h, w), checked against the step it
    resumes at and the request's shape; None for a run from noise (start_step 0)."""
    if latent is None:
        if start_step != 0:
            raise StepsError(f"start_step {start_step} needs the latent captured after it", field="k")
        return None
    if not 1 <= start_step <= steps - 1:
        raise StepsError(f"start_step must be in 1..{steps - 1} for {steps} steps", field="k")
    tensor = _latent_tensor(latent)
    if tensor.ndim == len(expected) + 1 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tuple(tensor.shape) != expected:
        raise LatentError(
            f"latent shape {tuple(tensor.shape)} does not fit this video: expected {expected} (C, F, h, w)",
            field="latent",
        )
    if not bool(torch.isfinite(tensor).all()):
        raise LatentError("latent holds NaN or infinite values", field="latent")
    return tensor


def _latent_tensor(latent: Latent | torch.Tensor) -> torch.Tensor:
    """A caller's latent as a CPU float tensor of its own (a cached latent may be a read-only view)."""
    if isinstance(latent, np.ndarray):
        tensor = torch.from_numpy(np.array(latent))
    elif isinstance(latent, torch.Tensor):
        tensor = latent.detach().to("cpu", copy=True)
    else:
        raise LatentError(
            f"a latent must be a numpy array or tensor, got {type(latent).__name__}", field="latent"
        )
    if not tensor.is_floating_point():
        raise LatentError(f"latent dtype {tensor.dtype} is not a float type", field="latent")
    return tensor


def decode_frames(pipe_or_vae: Any, latent: Latent | torch.Tensor) -> Frames:
    """A (C, F, h, w) latent decoded frame by frame (DECODE_BATCH per pass) to (F, H, W, 3) uint8.

    Undoes the VAE's scaling_factor (and shift) as TextToVideoSDPipeline.decode_latents does.
    """
    vae = getattr(pipe_or_vae, "vae", pipe_or_vae)
    tensor = _latent_tensor(latent)
    if tensor.ndim != 4:
        raise LatentError(f"a video latent is (C, F, h, w), got shape {tuple(tensor.shape)}", field="latent")
    frames = tensor.permute(1, 0, 2, 3).to(vae.device)  # (F, C, h, w): frames decode as images
    decoded: list[npt.NDArray[np.uint8]] = []
    with torch.inference_mode():
        for first in range(0, frames.shape[0], DECODE_BATCH):
            pixels = vae_decode(vae, frames[first : first + DECODE_BATCH]).float()
            rgb = (pixels / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1) * 255
            decoded.append(rgb.round().to(torch.uint8).cpu().numpy())
    return np.concatenate(decoded)


def encode_webp(frames: Frames, fps: int, *, lossless: bool = False, quality: int = WEBP_QUALITY) -> bytes:
    """Frames (F, H, W, 3) uint8 as an animated WebP that loops forever, 1000/fps ms a frame.

    libwebp merges a frame identical to the one before into that frame's duration, so a still
    stretch reads back as fewer, longer frames.
    """
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"frames must be (F, H, W, 3) uint8 with F >= 1, got {frames.dtype} {frames.shape}")
    if fps < 1:
        raise ValueError(f"fps must be at least 1, got {fps}")
    images = [Image.fromarray(frame) for frame in frames]
    out = io.BytesIO()
    images[0].save(
        out,
        format="WEBP",
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000 / fps)),
        loop=0,
        lossless=lossless,
        quality=quality,
    )
    return out.getvalue()


def _diffusers() -> Any:
    """diffusers, imported on first use (it is heavy) and typed Any: its stubs are incomplete."""
    import diffusers

    return diffusers
