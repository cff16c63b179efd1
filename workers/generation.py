"""The GPU task bodies: a miss generates and fills the cache; a hit reuses a cached entry.

Each runs under a lease on the job row (db.job_runs): a redelivered task waits for the lease
or finds the job ended, so a job is generated and completed once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from PIL import Image

from core import logs
from core.errors import LeaseBusy, SourceVanished
from core.params import GenerationParams, params_from_row, video_params_from_row
from core.scopes import uses_shared_scope
from core.vocabulary import DecodeMode, HitPolicy, JobKind, JobStatus, LookupMode, Route, WebhookEvent
from db import cache, stats
from db import cascade as cascade_db
from db import jobs as jobs_db
from db.blobs import keys
from db.cascade import LightStage
from db.codec.latent import decode_latent
from db.engine import session_scope
from db.images import ImageFormat, encode_image, record_image_key
from db.job_runs import Claim, ClaimOutcome, claim_run, complete
from db.models import Job
from workers import metrics
from workers.cache_fill import insert_entry
from workers.context import WorkerContext
from workers.lease import LeaseKeeper
from workers.notify import notify
from workers.operation import (
    count_success,
    end_job,
    record_service,
    reroute,
    run_denoising,
    store_final_latent,
)
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.results import GenerationResult
from workers.task_signals import current_queue
from workers.video_generation import run_video_hit, run_video_miss

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    id: uuid.UUID
    tenant_id: uuid.UUID
    params: GenerationParams
    cache_mode: str
    shared_cache: bool
    k: int | None
    source_entry_id: uuid.UUID | None
    decode_mode: str = DecodeMode.LAZY
    kind: str = JobKind.IMAGE.value
    background_entry_id: uuid.UUID | None = None  # a decoupled video hit's background source

    @property
    def route(self) -> str:
        """hit when admission found a source to reuse; miss otherwise."""
        return Route.HIT.value if self.source_entry_id is not None else Route.MISS.value


def generate_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cache_miss: a full T-step generation with capture; store, cache, complete, notify."""
    job = claim_job(context, job_id)
    if job is None:
        return
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        if job.kind == JobKind.VIDEO:  # issue 18: the video model, on the same queue
            run_video_miss(context, job, lease)
        else:
            generate_run(context, job, lease)


def generate_run(
    context: WorkerContext, job: JobView, lease: LeaseKeeper, *, cascade: LightStage | None = None
) -> None:
    """A full generation; `cascade`: the light stage of a job the discriminator escalated."""
    settings = context.settings
    # Intermediate latents only serve NIRVANA's resume, and only runs of the configured T.
    capture = (
        settings.capture_steps
        if settings.hit_policy is HitPolicy.RESUME
        and job.cache_mode != "off"
        and job.params.steps == settings.steps
        else []
    )
    result = run_operation(
        context,
        job,
        lease,
        lambda stop, on_step: context.runtime().generate(
            job.params, capture=capture, should_stop=stop, on_step=on_step
        ),
    )
    if result is None:
        return
    finish_run(context, job, lease, result, cache_it=job.cache_mode != "off", cascade=cascade)


def reuse_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cache_hit: resume (NIRVANA) or refine (MoDM) from the cached entry for T-k steps.

    When the entry or its state was evicted since admission, the job runs as a miss instead.
    """
    job = claim_job(context, job_id)
    if job is None:
        return
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        _reuse(context, job, lease)


def _reuse(context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
    if job.kind == JobKind.VIDEO:  # issue 18: FlexCache's whole or stitched hit
        run_video_hit(context, job, lease)
        return
    if job.source_entry_id is None or job.k is None:
        _reroute(context, job, "admitted as a hit without a source")
        return
    settings = context.settings
    entry_id, k = job.source_entry_id, job.k
    try:
        with session_scope(settings) as session:
            if settings.hit_policy is HitPolicy.RESUME:
                blob = cache.read_state_blob(session, context.blobs, entry_id=entry_id, k=k)
            else:
                blob = cache.read_final_latent(session, context.blobs, entry_id=entry_id)
    except SourceVanished as vanished:
        _reroute(context, job, str(vanished))
        return
    with metrics.timed(metrics.CODEC_SECONDS, operation="decode"):
        source = decode_latent(blob)
    runtime = context.runtime()
    if settings.hit_policy is HitPolicy.RESUME and source.family != runtime.family:
        _reroute(context, job, f"latent family {source.family} is not {runtime.family}'s")
        return

    def operation(stop: ShouldStop, on_step: OnStep) -> GenerationResult:
        if settings.hit_policy is HitPolicy.RESUME:
            return runtime.resume(
                job.params, source.array, k, family=source.family, should_stop=stop, on_step=on_step
            )
        return runtime.refine(job.params, source.array, source.family, k, should_stop=stop, on_step=on_step)

    result = run_operation(context, job, lease, operation)
    if result is None:
        return
    used = (entry_id, k if settings.hit_policy is HitPolicy.RESUME else None)
    cache_it = settings.cache_all and job.cache_mode != "off"
    finish_run(context, job, lease, result, cache_it=cache_it, used=used)


# --- steps shared by both ---------------------------------------------------------------------


def claim_job(
    context: WorkerContext, job_id: uuid.UUID, *, refuse_routes: tuple[str, ...] = ()
) -> JobView | None:
    """The job, claimed for this run; None when there is nothing to run (ended, moved, missing)."""
    settings = context.settings
    with session_scope(settings) as session:
        claim: Claim = claim_run(
            session,
            job_id,
            owner=context.owner,
            lease_s=settings.lease_s,
            max_attempts=settings.max_attempts,
            refuse_routes=refuse_routes,
        )
        if claim.outcome is ClaimOutcome.LEASED:
            raise LeaseBusy(claim.retry_in_s)
        if claim.outcome is not ClaimOutcome.CLAIMED or claim.job is None:
            ended_now = claim.outcome in (ClaimOutcome.CANCELED, ClaimOutcome.EXHAUSTED)
            view = None
        else:
            ended_now = False
            job: Job = claim.job
            view = JobView(
                id=job.id,
                tenant_id=job.tenant_id,
                params=video_params_from_row(job) if job.kind == JobKind.VIDEO else params_from_row(job),
                cache_mode=job.cache_mode,
                shared_cache=uses_shared_scope(
                    tenant_opted_in=jobs_db.tenant_opted_in_to_sharing(session, job.tenant_id),
                    cache_mode=job.cache_mode,
                ),
                k=job.k,
                source_entry_id=job.source_entry_id,
                decode_mode=job.decode_mode,
                kind=job.kind,
                background_entry_id=job.background_entry_id,
            )
            first_start = claim.first_start
            admitted_at = job.admitted_at
            logs.bind(job_id=job.id, tenant=job.tenant_id)
    if ended_now:
        notify(context, job_id, WebhookEvent.COMPLETED)
    if view is not None and first_start:
        if admitted_at is not None:
            waited = (datetime.now(UTC) - admitted_at).total_seconds()
            metrics.QUEUE_WAIT.labels(queue=current_queue()).observe(max(waited, 0.0))
        notify(context, job_id, WebhookEvent.STARTED)
    return view


def run_operation(
    context: WorkerContext,
    job: JobView,
    lease: LeaseKeeper,
    operation: Callable[[ShouldStop, OnStep], GenerationResult],
) -> GenerationResult | None:
    """Run the denoising, reporting its progress; it stops when the job is canceled or the lease is lost
    (LeaseLost). workers.operation.run_denoising, ending the job as an image job."""
    return run_denoising(
        context, job.id, lease, operation, lambda status, error: _end(context, job, status, error)
    )


def finish_run(
    context: WorkerContext,
    job: JobView,
    lease: LeaseKeeper,
    result: GenerationResult,
    *,
    cache_it: bool,
    used: tuple[uuid.UUID, int | None] | None = None,
    cascade: LightStage | None = None,
) -> None:
    """Store the run's latent (and entry), then complete the job. Every counted effect (the source
    entry's use, the interval statistics) commits with the completion, which only the lease holder's
    first completion makes: a redelivered or restarted run counts nothing twice. A run that lost its
    lease writes nothing (LeaseLost). `cascade`: the job's light stage, kept by the discriminator (this
    run is the light one) or escalated (this run is the heavy one: both models are the job's)."""
    lease.check()
    final_key, final_blob = store_final_latent(context, job.id, result)
    image, decodes = _pixels(context, job, result, cache_it=cache_it)
    if cache_it:
        insert_entry(context, job, result, final_blob, image)
    quality, image, decodes = _judged(context, job, result, image, decodes)
    image_key = None
    if image is not None and job.decode_mode == DecodeMode.EAGER:  # the first read needs no decode
        image_key = keys.image_key(job.id, ImageFormat.PNG.value)
        context.blobs.put(image_key, encode_image(image, ImageFormat.PNG))
    lease.check()
    with session_scope(context.settings) as session:
        if image_key is not None:
            record_image_key(session, job.id, ImageFormat.PNG.value, image_key)
        models, evals = _models_and_evaluations(result, cascade)
        if cascade is not None and not cascade.escalated:
            cascade_db.record_light_stage(session, job.id, owner=context.owner, stage=cascade)
        completed = complete(
            session,
            job.id,
            owner=context.owner,
            models_used=models,
            denoiser_evals=evals,
            final_latent_key=final_key,
            vae_decodes=decodes,
            quality=quality,
        )
        if completed and used is not None:
            cache.record_use(session, entry_id=used[0], k=used[1])
        if completed:
            record_service(session, context, result)
            stats.record_decodes(session, generations=1, generation_decodes=decodes)
    if completed:
        count_success(context, result)
        notify(context, job.id, WebhookEvent.COMPLETED)
    log.info(
        "job %s done on %s: %d steps from %d in %.2fs",
        *(job.id, result.model, result.steps_run, result.start_step, result.wall_s),
    )


def _models_and_evaluations(
    result: GenerationResult, cascade: LightStage | None
) -> tuple[list[str], dict[str, int]]:
    """The job's models and denoiser evaluations: this run's, and an escalated job's light stage too."""
    if cascade is None or not cascade.escalated:
        return [result.model], dict(result.denoiser_evals)
    evals = dict(cascade.light_evals)
    for model, count in result.denoiser_evals.items():
        evals[model] = evals.get(model, 0) + count
    return [cascade.light_model, result.model], evals


def _judged(
    context: WorkerContext, job: JobView, result: GenerationResult, image: Image.Image | None, decodes: int
) -> tuple[float | None, Image.Image | None, int]:
    """The configured scorer's score of the image for its prompt (WorkerContext.scorer: the lab judge
    on the lab's models, CLIP score on real ones), decoding the image if the run did not (one more VAE
    decode, counted), with the image and the decode count. None where no scorer is configured or the
    scorer cannot read the prompt (the judge: a prompt of no lab scene), and then nothing is decoded."""
    scorer = context.scorer()
    if scorer is None or not scorer.reads(job.params.prompt):
        return None, image, decodes
    if image is None:
        image = context.runtime().decode(result.final_latent, family=result.family).image
        decodes += 1
    quality = scorer.score([image], [job.params.prompt])[0]
    return quality, image, decodes


def _pixels(
    context: WorkerContext, job: JobView, result: GenerationResult, *, cache_it: bool
) -> tuple[Image.Image | None, int]:
    """The final image and the VAE decodes the generation ran, decoding only when something needs
    pixels now (LatentBox 4.1): an image-mode lookup embeds the image of the entry it caches, an eager
    request stores it. Otherwise None: the latent alone is stored and the decode pool decodes on read."""
    image_lookup = cache_it and context.settings.lookup_mode is LookupMode.TEXT_TO_IMAGE
    if result.image is not None or not (image_lookup or job.decode_mode == DecodeMode.EAGER):
        return result.image, result.vae_decodes
    decoded = context.runtime().decode(result.final_latent, family=result.family)
    return decoded.image, result.vae_decodes + 1


def _reroute(context: WorkerContext, job: JobView, reason: str) -> None:
    reroute(context, job.id, context.runtime().model_name, reason)


def _end(context: WorkerContext, job: JobView, status: JobStatus, error: str | None) -> None:
    end_job(context, job.id, model=context.runtime().model_name, route=job.route, status=status, error=error)
