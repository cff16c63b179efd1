"""DiffServe's cascade on the workers (3.1): a miss runs first on the light model; the discriminator
scores its image; the job completes with it when the score reaches the threshold, and is otherwise
escalated to the heavy model, which completes it.

Exactly once: the light stage runs under the job's lease like any generation; the escalation is one
conditional update by the lease holder (db.cascade.escalate) that records the stage, releases the
lease and says route=heavy, after which the heavy task is sent (and, were that message lost, the
reconciler sends it again from Postgres). The heavy run finds the light stage on the row and reports
both: models, evaluations, score. The webhook's started event fires at the light stage's first start,
the completed event once, at the final result.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace

from PIL import Image

from core import plugins
from core.vocabulary import DiscriminatorFeatures, Priority, Route
from db import cascade as cascade_db
from db.engine import session_scope
from jobs.policies.cascade import accepts, feature_kind_for
from workers.context import WorkerContext
from workers.job import JobView, claim_job
from workers.kinds import kind_of
from workers.kinds.image.generation import finish_run, generate_run, run_operation
from workers.lease import LeaseKeeper
from workers.operation import record_service
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.discriminator import Discriminator, image_features
from workers.runtime.results import GenerationResult
from workers.runtime.step_cache import full_calls_only

log = logging.getLogger(__name__)

THRESHOLD_TTL_S = 5.0  # how long a light worker keeps the threshold it read before reading it again
DISCRIMINATOR_TTL_S = 30.0  # how often it checks for a newer discriminator


def light_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cascade_light: the light model's generation, then the discriminator's verdict. A redelivery after
    the escalation finds the job routed heavy and runs nothing (db.job_runs.ClaimOutcome.MOVED)."""
    job = claim_job(context, job_id, refuse_routes=(Route.HEAVY.value,))
    if job is None:
        return
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        kind = kind_of(job.kind)
        if kind.cascades:
            _light(context, job, lease)
        else:  # no light model of its kind (a video job): its miss runs
            kind.generate(context, job, lease)


def escalated_job(context: WorkerContext, job_id: uuid.UUID) -> None:
    """cascade_heavy: the heavy model's full generation of a job the discriminator escalated."""
    job = claim_job(context, job_id)
    if job is None:
        return
    with session_scope(context.settings) as session:
        stage = cascade_db.light_stage(session, job.id)
    with LeaseKeeper(context.settings, job.id, owner=context.owner) as lease:
        generate_run(context, job, lease, cascade=stage)


def _light(context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
    runtime = context.runtime()
    light_steps = context.settings.cascade_light_steps  # never more steps than the request asked for
    params = replace(job.params, steps=min(light_steps, job.params.steps)) if light_steps else job.params

    def generate(stop: ShouldStop, on_step: OnStep) -> GenerationResult:
        with full_calls_only(not job.caches):  # `cache: off` turns the step cache off too
            return runtime.generate(params, should_stop=stop, decode=True, on_step=on_step)

    result = run_operation(context, job, lease, generate)
    if result is None:
        return
    assert result.image is not None  # decode=True
    score, version, reason = _score(context, result.image)
    threshold = threshold_now(context)
    escalated = score is None or not accepts(score, threshold)
    stage = cascade_db.LightStage(
        light_model=result.model,
        light_evals=dict(result.denoiser_evals),
        light_ms=round(result.wall_s * 1e3, 3),
        score=score,
        threshold=threshold,
        escalated=escalated,
        discriminator_version=version,
        reason=reason,
    )
    if not escalated:
        finish_run(context, job, lease, result, cache_it=job.cache_mode != "off", cascade=stage)
        return
    lease.check()
    with session_scope(context.settings) as session:
        moved = cascade_db.escalate(session, job.id, owner=context.owner, stage=stage)
        if moved:  # the light stage's work is counted once, with the escalation
            record_service(session, context, result)
    if not moved:
        return
    log.info("job %s escalated: score %s below threshold %.2f", job.id, score, threshold)
    try:
        context.dispatcher.run_route(job.id, Route.HEAVY, context.settings, priority=Priority(job.priority))
    except Exception:  # the row says heavy: the reconciler sends it again
        log.warning("job %s: could not queue its escalation now; the reconciler will", job.id, exc_info=True)


def _score(context: WorkerContext, image: Image.Image) -> tuple[float | None, int | None, str | None]:
    """The discriminator's confidence in the light image, its version, and why there is none."""
    loaded = _discriminator(context)
    if loaded is None:
        light = context.settings.model_source("small")
        return None, None, f"no discriminator trained for {light}: run `reprise cascade train`; escalated"
    version, discriminator = loaded
    on_lab = discriminator.kind is DiscriminatorFeatures.LAB
    features = image_features(
        discriminator.kind,
        [image],
        lab=plugins.feature_reader(context.settings, discriminator.kind.value) if on_lab else None,
        embedder=None if on_lab else context.image_embedder(),
    )
    return float(discriminator.confidence(features)[0]), version, None


def _discriminator(context: WorkerContext) -> tuple[int, Discriminator] | None:
    """The newest discriminator of this light model, checked for a newer one every DISCRIMINATOR_TTL_S."""
    cached = context.cascade_cache.get("discriminator")
    now = time.monotonic()
    if cached is not None and now - cached[0] < DISCRIMINATOR_TTL_S:
        return cached[1]  # type: ignore[no-any-return]
    light = context.settings.model_source("small")
    kind = feature_kind_for(light)
    with session_scope(context.settings) as session:
        version = cascade_db.latest_discriminator_version(session, light_model=light, features=kind.value)
        held = cached[1] if cached is not None else None
        if version is None:
            loaded = None
        elif held is not None and held[0] == version:
            loaded = held
        else:
            stored = cascade_db.latest_discriminator(session, light_model=light, features=kind.value)
            assert stored is not None
            loaded = (stored.version, Discriminator.from_bytes(stored.model))
    context.cascade_cache["discriminator"] = (now, loaded)
    return loaded


def threshold_now(context: WorkerContext) -> float:
    """The allocator's latest threshold (or the configured one before any), read every THRESHOLD_TTL_S."""
    cached = context.cascade_cache.get("threshold")
    now = time.monotonic()
    if cached is not None and now - cached[0] < THRESHOLD_TTL_S:
        return float(cached[1])
    with session_scope(context.settings) as session:
        threshold, _ = cascade_db.current_threshold(session, default=context.settings.cascade_threshold)
    context.cascade_cache["threshold"] = (now, threshold)
    return threshold
