"""An image job's admission (DESIGN: the request path): the identical request first, then embed,
predict (NIRVANA 5.2), look up the nearest entry and choose k (NIRVANA Algorithm 1)."""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt

from core.prompt_key import prompt_key
from core.scopes import lookup_scopes
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, HitPolicy, Route
from db import cache, predictor_store
from db.engine import session_scope
from jobs.admission import (
    MISS_UNSEARCHED,
    AdmissionDecision,
    Candidate,
    cache_applies,
    cheaper_route,
    decide,
)
from jobs.passes.quality_guard import GuardedTables
from jobs.passes.retrain import load_predictor
from jobs.policies.k_selection import ThresholdTable
from jobs.policies.predictor import MatchPredictor, likely_hit
from jobs.route_costs import route_costs_now
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.base import Admitted, StageTimer


def admit_image(context: WorkerContext, job: JobView, timer: StageTimer) -> Admitted:
    """The decision for an image job, and whether the match predictor said hit."""
    decision, predicted = _decide(context, job, timer)
    return Admitted(decision, predicted_hit=predicted)


def _decide(
    context: WorkerContext, request: JobView, timer: StageTimer
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
    with session_scope(settings) as session:  # the identical request: no embedding
        same = cache.lookup_prompt(
            session, prompt_key=prompt_key(request.params), scopes=scopes, model_family=family, size=size
        )
    timer.lap("prompt")
    if same is not None:
        return _routed(context, request, same), None
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
    decision = _routed(context, request, found)
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


def _routed(context: WorkerContext, request: JobView, found: cache.LookupResult | None) -> AdmissionDecision:
    """The decision for the nearest entry found (NIRVANA Algorithm 1's k for its similarity); under
    DiffServe's cascade, a hit that costs more than the miss route goes light-first instead."""
    settings = context.settings
    candidate = (
        Candidate(found.entry_id, found.similarity, found.stored_ks, found.final_latent_key is not None)
        if found is not None
        else None
    )
    decision = decide(
        candidate=candidate,
        table=threshold_table(settings),
        knob=settings.quality_knob,
        hit_policy=settings.hit_policy,
        steps=request.params.steps,
    )
    costs = route_costs_now(settings, context.cascade_cache) if decision.route is Route.HIT else None
    return cheaper_route(decision, costs, steps=request.params.steps)


def embed_query(context: WorkerContext, prompt: str) -> npt.NDArray[np.float32]:
    """The prompt in the lookup's space: text space (NIRVANA) or CLIP's joint space (MoDM); with the
    prompts of the worker's other threads when it has several (WorkerContext.query_embedder)."""
    vectors = context.query_embedder().embed_text([prompt])
    return np.asarray(vectors[0], dtype=np.float32)


def lookup_family(settings: Settings) -> str | None:
    """Intermediate latents resume only in their own latent space; final latents refine anywhere."""
    return settings.large_family if settings.hit_policy is HitPolicy.RESUME else None


_GUARDED = GuardedTables()


def threshold_table(settings: Settings) -> ThresholdTable:
    """The configured table; with the quality guard on, the guard's newest for it (cached briefly)."""
    return _GUARDED.get(settings)


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
