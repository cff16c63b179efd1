"""The public JSON form of a job, a "generation": one serializer for the API's responses and the
webhooks' `data`, so that a receiver sees exactly what GET /v1/generations/{id} returns.

A video job (FlexCache) has `kind` "video" and the Video* forms of input, output, metrics and urls: the
image forms plus frames, fps, noise_window; a `video` link instead of `image`; video_hit and
background_entry. An image job's JSON is what it was before video jobs, plus `kind`.

It lives in jobs/ (not api/) because the webhook worker needs it too and workers do not import api/.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.params import params_from_row, video_params_from_row
from core.vocabulary import AdmissionOutcome, DecodeMode, JobKind, JobStatus, in_stage_order
from db.models import Job
from jobs.estimates import Estimate, remaining_s

ImageFormatName = Literal["png", "webp", "jpeg"]
DEFAULT_IMAGE_FORMAT: ImageFormatName = "png"
VideoHitName = Literal["whole", "decoupled"]  # jobs.policies.video_hits.HitKind's values


class GenerationInput(BaseModel):
    prompt: str
    negative_prompt: str | None
    seed: int
    steps: int
    width: int
    height: int
    guidance: float
    cache: str
    decode: str = Field(
        DecodeMode.LAZY.value, description="lazy: decode on first read; eager: stored at completion."
    )
    webhook: str | None
    webhook_events_filter: list[str]
    priority: str = Field(
        default="normal", description="low, normal or high: how soon it runs against others."
    )
    deadline_s: float | None = Field(
        default=None, description="Seconds from submission it should end by; null: none."
    )
    on_deadline: str = Field(
        default="best_effort", description="fail or best_effort: what its deadline asked."
    )


class VideoGenerationInput(GenerationInput):
    """A video job's input: an image job's, plus its frames."""

    frames: int = Field(description="Frames in the video.")
    fps: int = Field(description="Frames per second of the animated WebP.")
    noise_window: int | None = Field(
        description="FreeNoise's window in frames; null: independent noise per frame."
    )


class GenerationOutput(BaseModel):
    image: str = Field(description="URL of the image; add ?format=png|webp|jpeg for another format.")
    format: ImageFormatName


class VideoGenerationOutput(BaseModel):
    video: str = Field(description="URL of the video (GET /v1/generations/{id}/video).")
    format: Literal["webp"] = Field(description="An animated WebP, looping, at the input's fps.")


class CascadeStage(BaseModel):
    """The light model's run and the discriminator's verdict (DiffServe 3.1)."""

    light_model: str = Field(description="The light model that ran first.")
    discriminator_score: float | None = Field(
        description="The discriminator's confidence that the light image is real (0..1); null when no "
        "discriminator was trained for the light model (the job was then escalated)."
    )
    threshold: float = Field(description="The confidence the light image needed to be kept.")
    escalated: bool = Field(description="Whether the heavy model ran the job after the light one.")
    discriminator_version: int | None = Field(description="The discriminator's stored version.")
    light_ms: float = Field(description="The light stage's generation time in ms.")


class GenerationMetrics(BaseModel):
    route: Literal["hit", "miss"] | None = Field(
        description="Whether the cache served it; null until admitted."
    )
    admission: AdmissionOutcome | None = Field(
        None,
        description="What admission decided: cache_off, predicted_miss (the match predictor skipped the "
        "search), searched_miss, hit, or costlier_hit (an entry was found, but under DiffServe's cascade "
        "the light stage cost less than resuming it, so it went light-first). Null until admitted.",
    )
    similarity: float | None = Field(description="Similarity of the cached entry that was reused.")
    k: int | None = Field(description="Denoising steps skipped thanks to the cache.")
    source_entry: uuid.UUID | None = Field(description="The cache entry reused, on a hit.")
    models: list[str] = Field(description="Models that ran.")
    denoiser_evaluations: dict[str, int] = Field(description="Denoiser evaluations, per model.")
    vae_decodes: int = Field(
        0,
        description="VAE decodes the generation ran: 0 when only the latent was stored; 1 for an eager "
        "request or an image-mode cache entry; refine of another family's latent adds 1. Reads decode "
        "apart (the decode pool).",
    )
    quality: float | None = Field(
        None,
        description="The configured scorer's score of the image for the prompt (core.scoring): on the "
        "lab's models the quality lab judge's, the fraction of the prompt's attributes it shows (0..1, "
        "docs/quality-lab.md); on real models with real CLIP weights CLIP score (0..100), given only when "
        "the image was decoded anyway. Null where no scorer ran.",
    )
    cascade: CascadeStage | None = Field(
        default=None,
        description="DiffServe's light stage, when the job went through the cascade (REPRISE_ALLOCATOR="
        "diffserve): null otherwise.",
    )
    admission_ms: dict[str, float] = Field(
        default_factory=dict,
        description="Admission time per stage in ms: embed, predict (when the predictor is on), lookup, "
        "total (only total when the cache was off). Empty until admitted.",
    )
    queue_time_s: float | None = Field(description="From creation to the start of generation.")
    run_time_s: float | None = Field(description="From the start of generation to completion.")
    stages_ms: dict[str, float] = Field(
        default_factory=dict,
        description="Where the job's time went, in ms by stage: queue (waiting, admission's own time "
        "excluded) and admission, then its run's worker time: claim, read (a hit's cached item), "
        "encode_prompt, denoise (its share of the batched steps' model calls), vae_decode, vae_encode, "
        "score, store, cache_fill, complete. The model's calls (encode_prompt, denoise, vae_*) are the "
        "job's device time, the rest the platform's. Filled once the job has succeeded.",
    )


class VideoGenerationMetrics(GenerationMetrics):
    """A video job's metrics: on a hit, whether the whole prompt matched or an object and a background
    were reused apart (FlexCache 4.2.2); source_entry is then the object's entry."""

    video_hit: VideoHitName | None = Field(
        description="whole: one cached video reused; decoupled: an object's and a background's; null: a miss."
    )
    background_entry: uuid.UUID | None = Field(
        description="The background's cache entry, on a decoupled hit."
    )


class GenerationUrls(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    self_: str = Field(alias="self")
    cancel: str
    image: str


class VideoGenerationUrls(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    self_: str = Field(alias="self")
    cancel: str
    video: str


class GenerationProgress(BaseModel):
    """How far a run got: the schedule steps done of its T (a hit starts at its k)."""

    step: int = Field(description="Schedule steps done (reported every few steps).")
    total: int = Field(description="The schedule's steps T.")
    estimated_remaining_s: float | None = Field(
        default=None, description="Seconds left at the pace of the steps so far; null before the first step."
    )


class GenerationQueue(BaseModel):
    """Where a waiting job stands (jobs.estimates: the jobs ahead over the route's workers and recent
    run time)."""

    position: int = Field(description="1: the next job of its queue to start.")
    estimated_start_s: float | None = Field(description="Seconds until it starts; null with no history.")
    estimated_finish_s: float | None = Field(description="Seconds until it ends; null with no history.")


class Generation(BaseModel):
    id: uuid.UUID
    kind: JobKind = Field(
        default=JobKind.IMAGE,
        description="image or video: video jobs carry the Video* input, output, metrics and urls.",
    )
    status: JobStatus
    progress: GenerationProgress | None = Field(
        default=None, description="While processing, and once succeeded; null before the first step."
    )
    queue: GenerationQueue | None = Field(
        default=None, description="While starting, on GET and the event stream; null otherwise and in lists."
    )
    # A subclass first: pydantic serializes each value by its own model of the union.
    input: VideoGenerationInput | GenerationInput
    output: VideoGenerationOutput | GenerationOutput | None = Field(
        description="Null until the job has succeeded."
    )
    error: str | None
    metrics: VideoGenerationMetrics | GenerationMetrics
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    urls: VideoGenerationUrls | GenerationUrls


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def generation_urls(job_id: uuid.UUID, *, base_url: str) -> GenerationUrls:
    own = f"{base_url.rstrip('/')}/v1/generations/{job_id}"
    return GenerationUrls.model_validate({"self": own, "cancel": f"{own}/cancel", "image": f"{own}/image"})


def video_urls(job_id: uuid.UUID, *, base_url: str) -> VideoGenerationUrls:
    own = f"{base_url.rstrip('/')}/v1/generations/{job_id}"
    return VideoGenerationUrls.model_validate(
        {"self": own, "cancel": f"{own}/cancel", "video": f"{own}/video"}
    )


def _progress(job: Job) -> GenerationProgress | None:
    if job.status == JobStatus.SUCCEEDED:
        total = job.progress_total or job.steps
        return GenerationProgress(step=total, total=total, estimated_remaining_s=0.0)
    if job.status != JobStatus.PROCESSING or job.progress_step is None or job.progress_total is None:
        return None
    elapsed = (datetime.now(UTC) - job.started_at).total_seconds() if job.started_at else 0.0
    remaining = remaining_s(
        step=job.progress_step, total=job.progress_total, first_step=job.k or 0, elapsed_s=elapsed
    )
    return GenerationProgress(
        step=job.progress_step, total=job.progress_total, estimated_remaining_s=remaining
    )


def queue_object(estimate: Estimate) -> GenerationQueue:
    return GenerationQueue(
        position=estimate.position, estimated_start_s=estimate.start_s, estimated_finish_s=estimate.finish_s
    )


def generation_object(job: Job, *, base_url: str, queue: GenerationQueue | None = None) -> Generation:
    """The job as clients see it. `base_url` prefixes the URLs ('' gives relative URLs); `queue`: where
    a waiting job stands, when the caller looked (it costs queries)."""
    video = job.kind == JobKind.VIDEO
    urls = video_urls(job.id, base_url=base_url) if video else generation_urls(job.id, base_url=base_url)
    return Generation(
        id=job.id,
        kind=JobKind(job.kind or JobKind.IMAGE),
        status=JobStatus(job.status),
        progress=_progress(job),
        queue=queue if job.status == JobStatus.STARTING else None,
        input=_input(job),
        output=_output(job, urls),
        error=job.error,
        metrics=_metrics(job),
        created_at=job.created_at,
        started_at=job.started_at,
        completed_at=job.finished_at,
        urls=urls,
    )


def _input(job: Job) -> VideoGenerationInput | GenerationInput:
    request: dict[str, Any] = {
        "cache": job.cache_mode,
        "decode": job.decode_mode,
        "webhook": job.webhook_url,
        "webhook_events_filter": list(job.webhook_events_filter or []),
        "priority": job.priority or "normal",
        "deadline_s": job.deadline_s,
        "on_deadline": job.on_deadline or "best_effort",
    }
    if job.kind == JobKind.VIDEO:
        return VideoGenerationInput(**asdict(video_params_from_row(job)), **request)
    return GenerationInput(**asdict(params_from_row(job)), **request)


def _output(
    job: Job, urls: VideoGenerationUrls | GenerationUrls
) -> VideoGenerationOutput | GenerationOutput | None:
    if job.status != JobStatus.SUCCEEDED:
        return None
    if isinstance(urls, VideoGenerationUrls):
        return VideoGenerationOutput(video=urls.video, format="webp")
    return GenerationOutput(image=f"{urls.image}?format={DEFAULT_IMAGE_FORMAT}", format=DEFAULT_IMAGE_FORMAT)


def _metrics(job: Job) -> VideoGenerationMetrics | GenerationMetrics:
    route: Literal["hit", "miss"] | None = (
        "hit" if job.route == "hit" else "miss" if job.route in ("miss", "heavy") else None
    )
    metrics: dict[str, Any] = {
        "route": route,
        "admission": _admission(job.admission_outcome),
        "similarity": job.similarity,
        "k": job.k,
        "source_entry": job.source_entry_id,
        "models": list(job.models_used or []),
        "denoiser_evaluations": dict(job.denoiser_evals or {}),
        "vae_decodes": job.vae_decodes or 0,
        "quality": job.quality,
        "cascade": _cascade_stage(job.cascade),
        "admission_ms": dict(job.admission_ms or {}),
        "queue_time_s": _seconds(job.created_at, job.started_at),
        "run_time_s": _seconds(job.started_at, job.finished_at),
        "stages_ms": _stages_ms(job),
    }
    if job.kind == JobKind.VIDEO:
        return VideoGenerationMetrics(
            **metrics, video_hit=_video_hit(job.video_hit), background_entry=job.background_entry_id
        )
    return GenerationMetrics(**metrics)


def _stages_ms(job: Job) -> dict[str, float]:
    """The job's time by stage: waiting and admission from its row's times, then its run's stages as its
    worker recorded them (workers.stages); empty until it has succeeded."""
    if job.stages_ms is None:
        return {}
    admission = float((job.admission_ms or {}).get("total", 0.0))
    waited = _seconds(job.created_at, job.started_at)
    before = {"queue": round(max(waited * 1e3 - admission, 0.0), 3)} if waited is not None else {}
    run = {name: float(ms) for name, ms in job.stages_ms.items()}
    return in_stage_order(before | {"admission": round(admission, 3)} | run)


def _admission(stored: str | None) -> AdmissionOutcome | None:
    """The row's admission_outcome; None before admission, or for a value this version does not know."""
    return AdmissionOutcome(stored) if stored in set(AdmissionOutcome) else None


def _video_hit(stored: str | None) -> VideoHitName | None:
    """The row's video_hit (a HitKind value); None for a miss, or a value this version does not know."""
    return "whole" if stored == "whole" else "decoupled" if stored == "decoupled" else None


def _cascade_stage(data: dict[str, Any] | None) -> CascadeStage | None:
    if not data:
        return None
    return CascadeStage(
        light_model=str(data.get("light_model")),
        discriminator_score=data.get("score"),
        threshold=float(data.get("threshold", 0.0)),
        escalated=bool(data.get("escalated")),
        discriminator_version=data.get("discriminator_version"),
        light_ms=float(data.get("light_ms") or 0.0),
    )


def generation_json(job: Job, *, base_url: str) -> dict[str, Any]:
    """generation_object as plain JSON types (what a webhook body's `data` holds)."""
    return generation_object(job, base_url=base_url).model_dump(mode="json", by_alias=True)
