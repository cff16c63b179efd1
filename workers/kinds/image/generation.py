"""An image job's runs: a miss generates all T steps (capturing NIRVANA's states when the hit policy
resumes them); a hit resumes a cached intermediate latent (NIRVANA 4.1) or refines a cached final one
(MoDM 5.1) for T - k steps. Both store the final latent, fill the cache unless the request turned it
off, and complete the job (workers.operation)."""

from __future__ import annotations

import uuid

from PIL import Image
from sqlalchemy.orm import Session

from core.errors import SourceVanished
from core.vocabulary import DecodeMode, HitPolicy, LookupMode, Priority
from db import cache
from db import cascade as cascade_db
from db.blobs import keys
from db.cascade import LightStage
from db.codec.latent import DecodedLatent, decode_latent
from db.engine import session_scope
from db.images import ImageFormat, encode_image
from workers import metrics, stages
from workers.audit import maybe_audit
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.image.cache_fill import prepare_entry
from workers.lease import LeaseKeeper
from workers.operation import Completion, Operation, complete_run, reroute, run_job, store_final_latent
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.results import GenerationResult
from workers.runtime.step_cache import full_calls_only


def generate_run(
    context: WorkerContext, job: JobView, lease: LeaseKeeper, *, cascade: LightStage | None = None
) -> None:
    """A full generation; `cascade`: the light stage of a job the discriminator escalated."""
    settings = context.settings
    # Intermediate latents only serve NIRVANA's resume, and only runs of the configured T.
    capture = (
        settings.capture_steps
        if settings.hit_policy is HitPolicy.RESUME and job.caches and job.params.steps == settings.steps
        else []
    )

    def generate(stop: ShouldStop, on_step: OnStep) -> GenerationResult:
        with full_calls_only(not job.caches):  # `cache: off` turns the step cache off too
            return context.runtime().generate(job.params, capture=capture, should_stop=stop, on_step=on_step)

    result = run_operation(context, job, lease, generate)
    if result is None:
        return
    finish_run(context, job, lease, result, cache_it=job.caches, cascade=cascade)


def reuse_run(context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
    """Resume (NIRVANA) or refine (MoDM) from the cached entry for T-k steps; when the entry or its state
    was evicted since admission, or its latent is of another family, the job runs as a miss instead."""
    if job.source_entry_id is None or job.k is None:
        _reroute(context, job, "admitted as a hit without a source")
        return
    settings = context.settings
    entry_id, k = job.source_entry_id, job.k
    try:
        with stages.stage("read"):
            source = _read_source(context, entry_id, k)
    except SourceVanished as vanished:
        _reroute(context, job, str(vanished))
        return
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
    cache_it = settings.cache_all and job.caches
    finish_run(context, job, lease, result, cache_it=cache_it, used=used)


def _read_source(context: WorkerContext, entry_id: uuid.UUID, k: int) -> DecodedLatent:
    """The hit's cached latent: the state at k (resume) or the final latent (refine), decoded."""
    with session_scope(context.settings) as session:
        if context.settings.hit_policy is HitPolicy.RESUME:
            blob = cache.read_state_blob(session, context.blobs, entry_id=entry_id, k=k)
        else:
            blob = cache.read_final_latent(session, context.blobs, entry_id=entry_id)
    with metrics.timed(metrics.CODEC_SECONDS, operation="decode"):
        return decode_latent(blob)


def run_operation(
    context: WorkerContext,
    job: JobView,
    lease: LeaseKeeper,
    operation: Operation,
) -> GenerationResult | None:
    """Run the denoising on the role's model, reporting its progress; it stops when the job is canceled
    or the lease is lost (LeaseLost). workers.operation.run_job."""
    return run_job(context, job, lease, operation, model=context.runtime().model_name)


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
    final_key, final_blob = store_final_latent(context, job, result)
    image, decodes = _pixels(context, job, result, cache_it=cache_it)
    entry = None
    if cache_it:
        with stages.stage("cache_fill"):
            entry = prepare_entry(context, job, result, final_blob, image)
    quality = _judged(context, job, image)
    output = None
    if image is not None and job.decode_mode == DecodeMode.EAGER:  # the first read needs no decode
        output = (ImageFormat.PNG.value, keys.image_key(job.id, ImageFormat.PNG.value))
        with stages.stage("store"):
            context.blobs.put(output[1], encode_image(image, ImageFormat.PNG))
    models, evals = _models_and_evaluations(result, cascade)
    completion = Completion(
        models, evals, decodes, output=output, quality=quality, used=[used] if used else ()
    )

    def keep_light_stage(session: Session) -> None:  # the discriminator kept this light run's image
        if cascade is not None and not cascade.escalated:
            cascade_db.record_light_stage(session, job.id, owner=context.owner, stage=cascade)

    def index_entry(session: Session) -> None:  # the entry exists exactly when the job completed
        if entry is not None:
            with stages.stage("cache_fill"):
                entry.index(session)

    complete_run(
        context,
        job,
        lease,
        result,
        final_key,
        completion,
        before_complete=keep_light_stage,
        on_completed=index_entry,
    )
    if used is not None:  # a hit: the quality guard audits a share of them against a fresh generation
        maybe_audit(context, job, quality, final_key)


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


def _judged(context: WorkerContext, job: JobView, image: Image.Image | None) -> float | None:
    """The configured scorer's score of the image for its prompt (WorkerContext.scorer: the lab judge
    on the lab's models, CLIP score on real ones), when the run decoded it anyway (an eager request, an
    image-mode cache entry). None where it did not: a decode only to score would undo LatentBox's decode
    on read (4.1), and on a hit of a few steps it costs a good part of the run; the benchmark reads such
    images itself (bench.live.judging) and the quality guard's audits score a sample (workers.audit).
    None too where no scorer is configured or it cannot read the prompt (the judge: no lab scene)."""
    scorer = context.scorer()
    if image is None or scorer is None or not scorer.reads(job.params.prompt):
        return None
    with stages.stage("score"):
        return scorer.score([image], [job.params.prompt])[0]


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
    reroute(context, job.id, context.runtime().model_name, reason, priority=Priority(job.priority))
