"""A video job's runs (FlexCache): a miss generates all T steps; a hit resumes from a cached state at
step k, whole (one entry's) or stitched from an object entry and a background entry (4.2.2).

They run under the job's claim and lease (workers.generation), with an image job's guarantees
(workers.operation): cancel stops the denoising, invalid input fails the job, a run that lost its lease
writes nothing, and every counted effect (the sources' uses, the interval statistics) commits with the
completion, once per job. Both store the final latent (as images do: the decode pool decodes it into
the animated WebP on the first read, LatentBox 4.1; with "decode": "eager" the WebP is stored now, one
of the job's image_keys under db.images.video_format) and, unless the request turned the cache off, the
states FlexCache saves (4.2.4: a miss all capture steps, a hit those after k) as a new video entry. A
hit whose source vanished or no longer fits the job runs as a miss.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.errors import CodecError, SourceVanished
from core.params import VideoParams
from core.vocabulary import DecodeMode, JobStatus, Priority
from db.blobs import keys
from db.codec.video import decode_video_state
from db.engine import session_scope
from db.images import video_format
from db.video_entries import VideoSource, read_video_source
from jobs.policies.video_hits import states_to_save
from workers import metrics
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.video.cache_fill import insert_video_result
from workers.lease import LeaseKeeper
from workers.operation import (
    Completion,
    Operation,
    complete_run,
    end_job,
    reroute,
    run_job,
    store_final_latent,
)
from workers.runtime.results import GenerationResult, Latent
from workers.runtime.stitching import stitch, unpack_mask

if TYPE_CHECKING:
    from workers.runtime.video import Frames

log = logging.getLogger(__name__)


def run_video_miss(context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
    """cache_miss for a video job: T steps from seeded noise, capturing every capture step (4.2.4)
    when the job may fill the cache and runs the configured T (the steps the states are kept for)."""
    params = _video_params(context, job)
    if params is None:
        return
    runtime = context.video_runtime()
    capture = states_to_save(None, context.settings.capture_steps) if _caches(context, job, params) else ()
    result = _run(
        context,
        job,
        lease,
        lambda stop, on_step: runtime.generate(
            params, capture=capture, should_stop=stop, on_step=on_step, role=context.role
        ),
    )
    if result is not None:
        _finish(context, job, lease, params, result, used=())


def run_video_hit(context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
    """cache_hit for a video job: resume from the source entry's state at k (a whole hit), or from the
    object entry's and the background entry's states at k stitched by their masks (a decoupled hit,
    job.background_entry_id set: 4.2.2), for T - k steps; capture the steps after k (4.2.4)."""
    params = _video_params(context, job)
    if params is None:
        return
    if job.source_entry_id is None or job.k is None:
        _reroute(context, job, "admitted as a hit without a source")
        return
    k, runtime = job.k, context.video_runtime()
    entries = _source_entries(job.source_entry_id, job.background_entry_id)
    try:
        with session_scope(context.settings) as session:
            sources = [read_video_source(session, context.blobs, entry_id=e, k=k) for e in entries]
        problem = _mismatch(sources, params, runtime.family)
        start = _start_latent(sources) if problem is None else None
    except (SourceVanished, CodecError) as unusable:
        problem, start = str(unusable), None
    if start is None:
        _reroute(context, job, problem or "no start latent")
        return
    capture = states_to_save(k, context.settings.capture_steps) if _caches(context, job, params) else ()
    result = _run(
        context,
        job,
        lease,
        lambda stop, on_step: runtime.resume(
            params, start, k, capture=capture, should_stop=stop, on_step=on_step, role=context.role
        ),
    )
    if result is not None:
        _finish(context, job, lease, params, result, used=[(entry, k) for entry in entries])


# --- the hit's sources ----------------------------------------------------------------------------


def _source_entries(source: uuid.UUID, background: uuid.UUID | None) -> list[uuid.UUID]:
    """The entries a hit reads: the whole prompt's (or the object's), then the background's."""
    return [source] if background is None or background == source else [source, background]


def _mismatch(sources: Sequence[VideoSource], params: VideoParams, family: str) -> str | None:
    """Why the sources cannot start this job (None when they can): a cached latent only continues a
    run of its own family, schedule length, frames and size; stitching needs both entries' masks."""
    for source in sources:
        if source.model_family != family:
            return f"latent family {source.model_family} is not {family}'s"
        made = (source.steps, source.frames, source.width, source.height)
        wanted = (params.steps, params.frames, params.width, params.height)
        if made != wanted:
            return f"source (steps, frames, width, height) {made} does not fit the job's {wanted}"
    if len(sources) > 1 and any(source.mask is None for source in sources):
        return "a decoupled hit's source keeps no object mask"
    return None


def _start_latent(sources: Sequence[VideoSource]) -> Latent:
    """The latent the hit resumes from: the one source's state, or the object source's and the
    background source's stitched (FlexCache 4.2.2: the object's where either mask is set)."""
    with metrics.timed(metrics.CODEC_SECONDS, operation="decode"):
        latents = [decode_video_state(source.state, source.base) for source in sources]
    if len(latents) == 1:
        return latents[0]
    objects, backgrounds = latents[0], np.asarray(latents[1], dtype=latents[0].dtype)
    shape = tuple(int(size) for size in objects.shape[1:])  # (F, h, w)
    masks = [unpack_mask(source.mask or b"", shape) for source in sources]
    return stitch(objects, masks[0], backgrounds, masks[1])


# --- what a miss and a hit share ----------------------------------------------------------------


def _video_params(context: WorkerContext, job: JobView) -> VideoParams | None:
    """The job's VideoParams; None (the job failed) when it is no video job."""
    if isinstance(job.params, VideoParams):
        return job.params
    error = f"job {job.id} of kind {job.kind} has no video parameters"
    model = context.settings.video_model_name
    end_job(context, job.id, model=model, route=job.route, status=JobStatus.FAILED, error=error)
    return None


def _caches(context: WorkerContext, job: JobView, params: VideoParams) -> bool:
    """Whether the run keeps states: the request lets it fill the cache, and it runs the configured T,
    the schedule the capture steps (and the lookups that resume them) are of."""
    return job.caches and params.steps == context.settings.steps


def _run(
    context: WorkerContext, job: JobView, lease: LeaseKeeper, operation: Operation
) -> GenerationResult | None:
    """Run the denoising with progress (workers.operation.run_job) as a run of the video model."""
    return run_job(context, job, lease, operation, model=context.settings.video_model_name)


def _finish(
    context: WorkerContext,
    job: JobView,
    lease: LeaseKeeper,
    params: VideoParams,
    result: GenerationResult,
    *,
    used: Sequence[tuple[uuid.UUID, int]],
) -> None:
    """Store the final latent, the WebP and the new entry, then complete the job; the sources' uses
    and the statistics commit with the completion, which only the lease holder's first one makes."""
    lease.check()
    final_key, final_blob = store_final_latent(context, job, result)
    quality, frames = _judged(context, params, result)
    output = None
    if job.decode_mode == DecodeMode.EAGER:  # else the decode pool decodes it on the first read
        output = (video_format(params.fps), keys.image_key(job.id, video_format(params.fps)))
        webp = context.video_runtime().to_webp(result.final_latent, params.fps, frames=frames)[0]
        context.blobs.put(output[1], webp)
    if job.caches:
        insert_video_result(context, job, params, result, final_blob)
    decodes = int(frames is not None or output is not None)  # an eager WebP reuses the judged frames
    completion = Completion(
        [result.model],
        dict(result.denoiser_evals),
        vae_decodes=decodes,
        output=output,
        quality=quality,
        used=used,
    )
    complete_run(context, job, lease, result, final_key, completion)


def _judged(
    context: WorkerContext, params: VideoParams, result: GenerationResult
) -> tuple[float | None, Frames | None]:
    """The video scorer's score of the video for its prompt (WorkerContext.video_scorer: the lab's video
    judge on lab:video), decoding its frames (one VAE decode of every frame, counted; an eager WebP
    reuses them), and the frames. (None, None) where no scorer is configured or it does not read the
    prompt (no moving scene of the lab's world): then nothing is decoded."""
    scorer = context.video_scorer()
    if scorer is None or not scorer.reads(params.prompt):
        return None, None
    frames = context.video_runtime().frames(result.final_latent)
    return scorer.score([frames], [params.prompt])[0], frames


def _reroute(context: WorkerContext, job: JobView, reason: str) -> None:
    reroute(context, job.id, context.settings.video_model_name, reason, priority=Priority(job.priority))
