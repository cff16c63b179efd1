"""The video runtime (issue 18, FlexCache): one process's text-to-video pipeline, loaded once, and the
operations a video job runs on it: a full generation with capture (a miss), a resume from a cached or
stitched state (a hit), and the frames of a final latent as an animated WebP.

It mirrors DiffusionRuntime minimally: settings.device ('auto': CUDA when present), float16 on CUDA and
float32 on a CPU (workers.runtime.loading), and results as GenerationResult, so the task bodies count
evaluations, store latents and report metrics as they do for images. Not thread-safe: a GPU worker
runs one job at a time.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from core.params import VideoParams
from core.settings import Settings
from core.vocabulary import Role
from workers import metrics
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.loading import compute_dtype, resolve_device
from workers.runtime.results import GenerationResult, Latent
from workers.runtime.tiny_video import TINY_VIDEO_FAMILY, ensure_tiny_video_model
from workers.runtime.video import VideoRun, decode_frames, encode_webp, generate_video, load_video_pipeline


def video_model_source(settings: Settings) -> str:
    """What `from_pretrained` reads for settings.video_model: the tiny model's directory (built offline
    under settings.tiny_models_dir on first use) for 'tiny-video', else the id or directory as given."""
    if settings.video_model == TINY_VIDEO_FAMILY:
        return str(ensure_tiny_video_model(Path(settings.tiny_models_dir)))
    return settings.video_model


class VideoRuntime:
    """Hosts settings.video_model. `family`: its latents' family (settings.video_family), the key of the
    video entries it may resume; `model_name`: the key of denoiser_evals."""

    def __init__(self, settings: Settings) -> None:
        self.device = resolve_device(settings.device)
        self.dtype = compute_dtype(self.device)
        self.family = settings.video_family
        self.model_name = settings.video_model
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
            self._pipe, params, start_latent=latent, start_step=k, capture=capture,
            should_stop=should_stop, on_step=on_step,
        )  # fmt: skip
        return self._result(run, role, started)

    def to_webp(self, final_latent: Latent, fps: int) -> tuple[bytes, int]:
        """The video of a final (C, F, h, w) latent: its VAE-decoded frames as an animated WebP at `fps`,
        and the number of frames."""
        frames = decode_frames(self._pipe, final_latent)
        return encode_webp(frames, fps), len(frames)

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
