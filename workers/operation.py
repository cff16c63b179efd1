"""What a run of either kind of job (workers.kinds) goes through: one denoising run stopped by the job's
cancel flag or a lost lease, the final latent's store, the completion that counts every effect once,
the reroute of a hit whose source is gone, the end of a job that did not complete, and the jobs'
metrics."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from core.errors import GenerationCanceled, InvalidInput
from core.vocabulary import JobStatus, Priority, Route, WebhookEvent
from db import cache, stats
from db.blobs import keys
from db.codec.latent import encode_latent
from db.engine import session_scope
from db.images import record_image_key
from db.job_runs import complete, finish, reroute_to_miss
from workers import metrics, stages
from workers.context import WorkerContext
from workers.job import JobView
from workers.lease import LeaseKeeper
from workers.notify import notify
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.results import GenerationResult

log = logging.getLogger(__name__)

Operation = Callable[[ShouldStop, OnStep], GenerationResult]
EndJob = Callable[[JobStatus, str | None], None]


def run_denoising(
    context: WorkerContext, job_id: uuid.UUID, lease: LeaseKeeper, operation: Operation, end: EndJob
) -> GenerationResult | None:
    """Run the denoising, reporting its progress; None when it stopped: canceled (`end` records it) or a
    lost lease (LeaseLost: the job runs again elsewhere), or its input was invalid (`end` fails it). Its
    cancel flag and progress go through the process's run watch (workers.run_watch), so the steps never
    wait on the database; its steps are told to the lease, which is renewed only while they progress
    (workers.lease: a hung step or a run past its deadline loses the job to another worker)."""
    with context.run_watch().watching(job_id, context.owner) as watched:

        def should_stop() -> bool:  # asked before each step: the step begins (workers.run_clock)
            lease.step_begins()
            return lease.lost or watched.canceled

        def on_step(step: int, total: int) -> None:
            lease.step_ended(step, total)
            watched.report(step, total)

        try:
            return operation(should_stop, on_step)
        except GenerationCanceled:
            lease.check()  # stopped for a lost lease: no cancel to record, the job runs again elsewhere
            end(JobStatus.CANCELED, None)
        except InvalidInput as invalid:
            end(JobStatus.FAILED, f"invalid input: {invalid}")
        finally:
            lease.run_ended()
    return None


def run_job(
    context: WorkerContext, job: JobView, lease: LeaseKeeper, operation: Operation, *, model: str
) -> GenerationResult | None:
    """run_denoising for `job`, which a cancel or invalid input ends as a run of `model`."""

    def end(status: JobStatus, error: str | None) -> None:
        end_job(context, job.id, model=model, route=job.route, status=status, error=error)

    return run_denoising(context, job.id, lease, operation, end)


@dataclass(frozen=True)
class Completion:
    """What a run's completion records besides its final latent: the job's models and denoiser
    evaluations, its VAE decodes, an output stored now (its format and key: an eager request's image or
    WebP), the quality score, and the cached sources the run used (entry, k: None for a final latent)."""

    models: list[str]
    denoiser_evals: dict[str, int]
    vae_decodes: int
    output: tuple[str, str] | None = None
    quality: float | None = None
    used: Sequence[tuple[uuid.UUID, int | None]] = ()


def complete_run(
    context: WorkerContext,
    job: JobView,
    lease: LeaseKeeper,
    result: GenerationResult,
    final_key: str,
    completion: Completion,
    *,
    before_complete: Callable[[Session], None] | None = None,
    on_completed: Callable[[Session], None] | None = None,
) -> None:
    """Complete the job with its run. Every counted effect (the sources' uses, the interval statistics)
    commits with the completion, which only the lease holder's first completion makes: a redelivered or
    restarted run counts nothing twice; a run that lost its lease writes nothing (LeaseLost).
    `before_complete`: what else commits with it (a cascade's light stage); `on_completed`: what commits
    with it only when this run completed the job (the cache entry the run filled)."""
    lease.check()
    clock = stages.current()
    with stages.stage("complete"), session_scope(context.settings) as session:
        if completion.output is not None:
            record_image_key(session, job.id, *completion.output)
        if before_complete is not None:
            before_complete(session)
        completed = complete(
            session,
            job.id,
            owner=context.owner,
            models_used=completion.models,
            denoiser_evals=completion.denoiser_evals,
            final_latent_key=final_key,
            vae_decodes=completion.vae_decodes,
            quality=completion.quality,
            stages_ms=clock.so_far() if clock is not None else None,
        )
        if completed:
            if on_completed is not None:
                on_completed(session)
            for entry_id, k in completion.used:
                cache.record_use(session, entry_id=entry_id, k=k)
            record_service(session, context, result)
            stats.record_decodes(session, generations=1, generation_decodes=completion.vae_decodes)
    if completed:
        count_success(context, result)
        notify(context, job.id, WebhookEvent.COMPLETED, wanted=job.wants(WebhookEvent.COMPLETED))
        if clock is not None:
            observe_stages(context, result, clock.so_far())
    log.info(  # the line starts "job <id> done" for every kind: operators' searches match it
        "job %s done on %s (%s): %d steps from %d in %.2fs",
        *(job.id, result.model, job.kind, result.steps_run, result.start_step, result.wall_s),
    )


def store_final_latent(context: WorkerContext, job: JobView, result: GenerationResult) -> tuple[str, bytes]:
    """The run's final latent, encoded (pcodec) and stored under the job at its run's own key (fenced
    by the lease: db.blobs.keys.job_final_latent_key): its key and blob."""
    with stages.stage("store"):
        with metrics.timed(metrics.CODEC_SECONDS, operation="encode"):
            blob = encode_latent(result.final_latent, family=result.family, k=None)
        key = keys.job_final_latent_key(job.id, job.attempt)
        context.blobs.put(key, blob)
    return key, blob


def record_service(session: Session, context: WorkerContext, result: GenerationResult) -> None:
    """The run's service time and steps in the interval statistics (the pool controllers read them)."""
    stats.record_service(
        session,
        role=context.serving_role.value,  # a co-hosting small worker's miss counts for the large model
        service_ms=result.service_s * 1e3,  # batched: its share of the worker, not its wall time
        steps=result.steps_run,
        denoiser_evals=result.denoiser_evals,
    )


def reroute(
    context: WorkerContext,
    job_id: uuid.UUID,
    model: str,
    reason: str,
    *,
    priority: Priority = Priority.NORMAL,
) -> None:
    """Run a hit as a miss, at the job's priority: the job row, and the interval its admission was
    counted in, say miss."""
    log.warning("job %s: cached source unusable (%s); running it as a miss", job_id, reason)
    count_job(context, model, Route.HIT.value, "rerouted")
    with session_scope(context.settings) as session:
        counted = reroute_to_miss(session, job_id, owner=context.owner)
        if counted is not None:
            stats.correct_hit_to_miss(session, k=counted.k, at=counted.admitted_at)
    context.dispatcher.run_route(job_id, Route.MISS, context.settings, priority=priority)


def end_job(
    context: WorkerContext, job_id: uuid.UUID, *, model: str, route: str, status: JobStatus, error: str | None
) -> None:
    """End a job that did not complete (canceled, failed), once, and tell its webhook."""
    with session_scope(context.settings) as session:
        changed = finish(session, job_id, status, error=error)
    if changed:
        count_job(context, model, route, status.value)
        notify(context, job_id, WebhookEvent.COMPLETED)


def count_job(context: WorkerContext, model: str, route: str, outcome: str) -> None:
    metrics.JOBS.labels(role=context.serving_role.value, model=model, route=route, outcome=outcome).inc()


def observe_stages(context: WorkerContext, result: GenerationResult, spent: dict[str, float]) -> None:
    """A completed job's time by stage (workers.stages) in the stage histogram."""
    route = Route.HIT.value if result.start_step > 0 else Route.MISS.value
    role = context.serving_role.value
    for name, ms in spent.items():
        metrics.JOB_STAGE_SECONDS.labels(role=role, route=route, stage=name).observe(ms / 1e3)


def count_success(context: WorkerContext, result: GenerationResult) -> None:
    route = Route.HIT.value if result.start_step > 0 else Route.MISS.value
    role = context.serving_role.value
    count_job(context, result.model, route, JobStatus.SUCCEEDED.value)
    metrics.SKIPPED_STEPS.labels(role=role, route=route).observe(result.start_step)
    metrics.RUN_SECONDS.labels(role=role, model=result.model, route=route).observe(result.wall_s)
