"""Video: FlexCache's approximate cache for text-to-video jobs: the video pipeline, the video scopes'
byte budget, the compression of cached states and the decoupled lookup. The schedule (steps,
capture_steps) is the image jobs': FlexCache keeps NIRVANA's key steps (2.2, 3.2)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class VideoSettings(BaseSettings):
    """Video (FlexCache): the video model, its cache budget, state compression and lookup.

    A video job is the other kind of job: it shares the image jobs' schedule (steps, capture_steps),
    queues and pools, and keeps its cache entries in video scopes of their own.
    """

    video_model: str = Field(
        "tiny-video",
        description="The text-to-video pipeline video jobs run (diffusers' TextToVideoSDPipeline layout): a "
        "Hugging Face id (e.g. ali-vilab/text-to-video-ms-1.7b), a local directory, or 'tiny-video', a "
        "random tiny model the project builds offline (workers.runtime.tiny). Every GPU worker "
        "loads it on its first video job.",
    )
    video_cache_budget_bytes: int = Field(
        1 << 30,
        ge=0,
        description="Byte budget of each video scope (compressed states, bases, masks and final latents), "
        "kept by LRBU (FlexCache 4.2.3) apart from the image budget.",
    )
    video_state_error_bound: float | None = Field(
        1e-3,
        gt=0,
        description="Every element of a cached video state decodes within this of the captured one (a "
        "quantised residual over FlexCache 4.1's linear model; db.codec.video). Unset: the paper's "
        "model alone, 6.7x smaller, unbounded (README 'Video': 3.4x with 1e-3; resume error 6.5e-5 "
        "against 0.026).",
    )
    video_decoupled_lookup: bool = Field(
        True,
        description="Look a video prompt up by its object and background phrases too (FlexCache 4.2.1); "
        "false: by the whole prompt only (NIRVANA's lookup, the paper's ablation, 6.2.2).",
    )
    video_key_frame_similarity: float = Field(
        0.99,
        gt=0,
        le=1,
        description="A frame within this cosine of the last key frame is stored as a repeat of it "
        "(FlexCache 5, 'Cache compressor', Fig. 14a: 0.99).",
    )

    @property
    def video_family(self) -> str:
        """The latent family of video_model's latents: video entries are reused only by it (DESIGN: a
        cache entry is keyed by its model family). The source itself names it: 'tiny-video', an id or a
        directory."""
        return self.video_model
