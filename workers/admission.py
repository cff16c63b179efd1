"""The admit task's body: embed, predict, look up, choose k, record, route (DESIGN: the request path)."""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from core import logs
from core.params import GenerationParams, params_from_row, video_params_from_row
from core.prompt_key import prompt_key
from core.scopes import lookup_scopes, uses_shared_scope
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, HitPolicy, JobKind, JobStatus, Route
from db import cache, predictor_store, stats
from db import jobs as jobs_db
from db.engine import session_scope
from db.job_runs import record_admission
from jobs.admission import MISS_UNSEARCHED, AdmissionDecision, Candidate, cache_applies, decide
from jobs.passes.retrain import load_predictor
from jobs.policies.k_selection import ThresholdTable, configured_table
from jobs.policies.predictor import MatchPredictor, likely_hit
from jobs.queues import Queue
from workers import metrics
from workers.context import WorkerContext
from workers.video_admission import VideoDecision, decide_video

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Request:
    job_id: uuid.UUID
    tenant_id: uuid.UUID
    params: GenerationParams
    cache_mode: str
    shared_cache: bool
    kind: str = JobKind.IMAGE.value


def admit(context: WorkerContext, job_id: uuid.UUID) -> AdmissionDecision | None:
    """Decide and route one waiting job. Idempotent: a job already admitted is only re-routed.
    The job's log fields are bound for the call only: a thread of an admit pool, or a caller outside
    Celery, keeps its own context afterwards."""
    with logs.bound():
        return _admit(context, job_id)


def _admit(context: WorkerContext, job_id: uuid.UUID) -> AdmissionDecision | None:
    settings = context.settings
    with session_scope(settings) as session:
        job = jobs_db.job_by_id(session, job_id)
        if job is None or job.status != JobStatus.STARTING.value:
            return None
        if job.admitted_at is not None and job.route is not None:
            # redelivered after routing: the route task dedups
            context.dispatcher.run_route(job_id, Route(job.route), settings)
            return None
        logs.bind(job_id=job.id, tenant=job.tenant_id)
        waited = (datetime.now(UTC) - job.created_at).total_seconds()
        metrics.QUEUE_WAIT.labels(queue=Queue.ADMIT.value).observe(max(waited, 0.0))
        request = _Request(
            job_id=job.id,
            tenant_id=job.tenant_id,
            params=video_params_from_row(job) if job.kind == JobKind.VIDEO else params_from_row(job),
            cache_mode=job.cache_mode,
            shared_cache=uses_shared_scope(
                tenant_opted_in=jobs_db.tenant_opted_in_to_sharing(session, job.tenant_id),
                cache_mode=job.cache_mode,
            ),
            kind=job.kind,
        )
    timer = StageTimer()
    video = _decide_video(context, request) if request.kind == JobKind.VIDEO else None
    if video is not None:
        timer.lap("video_lookup")  # three embeddings in one call, three lookups
    decision, predicted = (video.decision, None) if video is not None else _decide(context, request, timer)
    timings = timer.finish()
    with session_scope(settings) as session:
        recorded = record_admission(
            session,
            job_id,
            outcome=decision.outcome.value,
            predictor_said_hit=predicted,
            route=decision.route.value,
            similarity=decision.similarity,
            k=decision.k,
            source_entry_id=decision.source_entry_id,
            admission_ms=timings,
            background_entry_id=video.background_entry_id if video is not None else None,
            video_hit=video.video_hit if video is not None and video.video_hit is not None else None,
        )
        if recorded:
            stats.record_admission(session, outcome=decision.outcome, k=decision.k)
    if not recorded:  # canceled or admitted by a concurrent delivery meanwhile
        return None
    context.dispatcher.run_route(job_id, decision.route, settings)
    log.info(
        "admitted %s: %s k=%s similarity=%s in %s ms",
        job_id,
        decision.outcome.value,
        decision.k,
        decision.similarity,
        timings,
    )
    return decision


def _decide_video(context: WorkerContext, request: _Request) -> VideoDecision:
    """A video job (issue 18): FlexCache's three lookups (workers.video_admission), unless it asked for
    no cache."""
    if request.cache_mode == "off":
        return VideoDecision(AdmissionDecision(AdmissionOutcome.CACHE_OFF, Route.MISS))
    return decide_video(context, request.params, request.tenant_id, shared_cache=request.shared_cache)


class StageTimer:
    """Milliseconds per admission stage (embed, predict, lookup), and the total."""

    def __init__(self) -> None:
        self.started = self.mark = time.perf_counter()
        self.stages: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = round((now - self.mark) * 1e3, 3)
        self.mark = now

    def finish(self) -> dict[str, float]:
        return {**self.stages, "total": round((time.perf_counter() - self.started) * 1e3, 3)}


def _decide(
    context: WorkerContext, request: _Request, timer: StageTimer
) -> tuple[AdmissionDecision, bool | None]:
    settings = context.settings
    if not cache_applies(
        cache_mode=request.cache_mode,
        hit_policy=settings.hit_policy,
        steps=request.params.steps,
        capture_steps_t=settings.steps,
    ):
        return AdmissionDecision(AdmissionOutcome.CACHE_OFF, Route.MISS), None
    scopes = lookup_scopes(request.tenant_id, shared_cache=request.shared_cache)
    family = lookup_family(settings)
    size = (request.params.width, request.params.height)
    with session_scope(settings) as session:  # the identical request: no embedding (issue 17)
        same = cache.lookup_prompt(
            session, prompt_key=prompt_key(request.params), scopes=scopes, model_family=family, size=size
        )
    timer.lap("prompt")
    if same is not None:
        return _routed(settings, request, same), None
    embedding = embed_query(context, request.params.prompt)
    timer.lap("embed")
    predicted: bool | None = None
    versions: list[int] = []
    if settings.predictor_enabled:
        loaded = [_predictor(context, scope, family) for scope in scopes]
        versions = [version for version, _ in loaded if version is not None]
        predicted = likely_hit([model for _, model in loaded], embedding)
        timer.lap("predict")
        # NIRVANA 5.2: a predicted miss skips the vector search. A sample of them is searched
        # anyway (not used for routing) so the predictor's recall can be measured.
        if not predicted and random.random() >= settings.predictor_audit_rate:
            return MISS_UNSEARCHED, predicted
    with session_scope(settings) as session:
        found = cache.lookup(
            session,
            query_embedding=embedding,
            mode=settings.lookup_mode,
            scopes=scopes,
            model_family=family,
            ef_search=settings.hnsw_ef_search,
            ef_reference_entries=settings.hnsw_ef_reference_entries,
            size=size,
            exact_max=settings.lookup_exact_max,
            max_scan_tuples=settings.hnsw_max_scan_tuples,
        )
    timer.lap("lookup")
    decision = _routed(settings, request, found)
    if predicted is not None and versions:
        actual = decision.route is Route.HIT
        with session_scope(settings) as session:
            for version in versions:
                predictor_store.record_outcome(
                    session, version=version, predicted_hit=predicted, actual_hit=actual
                )
    if predicted is False:
        return MISS_UNSEARCHED, predicted  # the audit searched, but the predictor's miss stands
    return decision, predicted


def _routed(settings: Settings, request: _Request, found: cache.LookupResult | None) -> AdmissionDecision:
    """The decision for the nearest entry found (NIRVANA Algorithm 1's k for its similarity)."""
    candidate = (
        Candidate(found.entry_id, found.similarity, found.stored_ks, found.final_latent_key is not None)
        if found is not None
        else None
    )
    return decide(
        candidate=candidate,
        table=threshold_table(settings),
        knob=settings.quality_knob,
        hit_policy=settings.hit_policy,
        steps=request.params.steps,
    )


def embed_query(context: WorkerContext, prompt: str) -> npt.NDArray[np.float32]:
    """The prompt in the lookup's space: text space (NIRVANA) or CLIP's joint space (MoDM); with the
    prompts of the worker's other threads when it has several (WorkerContext.query_embedder)."""
    vectors = context.query_embedder().embed_text([prompt])
    return np.asarray(vectors[0], dtype=np.float32)


def lookup_family(settings: Settings) -> str | None:
    """Intermediate latents resume only in their own latent space; final latents refine anywhere."""
    return settings.large_family if settings.hit_policy is HitPolicy.RESUME else None


def threshold_table(settings: Settings) -> ThresholdTable:
    return configured_table(settings)


def _predictor(
    context: WorkerContext, scope: str, family: str | None
) -> tuple[int | None, MatchPredictor | None]:
    """The newest fit for a scope, reloaded only when its version changed."""
    settings = context.settings
    key = (scope, family or settings.large_family, settings.lookup_mode.value)
    with session_scope(settings) as session:
        version = predictor_store.latest_version(
            session, scope=scope, model_family=key[1], mode=settings.lookup_mode
        )
        if version is None:
            return None, None
        cached = context.predictors.get(key)  # threads may both load a new fit: the same one, stored twice
        if cached is not None and cached[0] == version:
            return version, cached[1]
        loaded = load_predictor(session, scope=scope, model_family=key[1], mode=settings.lookup_mode)
    if loaded is None:
        return None, None
    context.predictors[key] = (loaded.version, loaded.predictor)
    return loaded.version, loaded.predictor
