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

    video_model: str | None = Field(
        None,
        description="The text-to-video pipeline video jobs run (diffusers' TextToVideoSDPipeline layout): a "
        "Hugging Face id (e.g. ali-vilab/text-to-video-ms-1.7b), a local directory, 'lab:video' (the "
        "quality lab's trained model) or 'tiny-video' (random weights, built offline). Unset: the model "
        "set's, lab:video or tiny-video. Every GPU worker loads it on its first video job.",
    )
    video_cache_budget_bytes: int = Field(
        1 << 30,
        ge=0,
        description="Byte budget of each video scope (compressed states, bases, masks and final latents), "
        "kept by LRBU (FlexCache 4.2.3) apart from the image budget.",
    )
    video_state_error_bound: float | None = Field(
        0.02,
        gt=0,
        description="Every element of a cached video state decodes within this of the captured one: "
        "everything stored lies on its grid (FlexCache 4.1's linear model, then the residual; "
        "db.codec.video). 0.02 of the latents' unit scale keeps the paper's criterion for a "
        "decompressed state (6.2.4, Fig. 21: cosine > 0.995) ninefold (relative error 0.011 on "
        "lab:video) and its hits' judged quality (docs/results/video.md). Unset: the paper's model "
        "alone, unbounded.",
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
