"""Admission of a video job (FlexCache 3.2 and 4.2.1): the whole prompt, its object phrase and
its background phrase are embedded together and each looked up in the job's video scopes; FlexCache's
choice (jobs.policies.video_hits.choose_video_hit) makes a whole hit, a decoupled hit (the object of one
entry stitched onto the background of another) or a miss.

The threshold table is NIRVANA's (FlexCache follows it), profiled on T = 50: the stored ks of a run of
T steps are compared in that scale and the k chosen is mapped back (jobs.admission.scale_k's rule).
"""

from __future__ import annotations

import uuid

import numpy as np

from core.params import GenerationParams, VideoParams
from core.scopes import lookup_scopes, video_scope
from core.settings import Settings
from core.vocabulary import AdmissionOutcome, LookupMode, Route
from db import video_lookup
from db.engine import session_scope
from db.video_lookup import VideoIndex, VideoMatch, VideoShape
from jobs.admission import PROFILED_STEPS, AdmissionDecision
from jobs.policies.decoupling import split_prompt
from jobs.policies.k_selection import AUTO, NIRVANA_T2T, ThresholdTable, table_for
from jobs.policies.video_hits import HitKind, Match, VideoHit, choose_video_hit
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.base import Admitted, StageTimer


def admit_video(context: WorkerContext, job: JobView, timer: StageTimer) -> Admitted:
    """FlexCache's three lookups and its choice, unless the request asked for no cache."""
    if job.caches:
        admitted = decide_video(context, job.params, job.tenant_id, shared_cache=job.shared_cache)
    else:
        admitted = Admitted(AdmissionDecision(AdmissionOutcome.CACHE_OFF, Route.MISS))
    timer.lap("video_lookup")  # three embeddings in one call, three lookups
    return admitted


def decide_video(
    context: WorkerContext, params: GenerationParams, tenant_id: uuid.UUID, *, shared_cache: bool
) -> Admitted:
    """Embed, look up three ways and choose; a miss without searching when the run cannot use the cache
    (captures exist only for runs of the configured T)."""
    settings = context.settings
    if not isinstance(params, VideoParams):
        raise TypeError("decide_video takes a video job's parameters")
    if params.steps != settings.steps:
        return Admitted(AdmissionDecision(AdmissionOutcome.CACHE_OFF, Route.MISS))
    parts = split_prompt(params.prompt)
    decoupled = parts.decoupled and settings.video_decoupled_lookup
    phrases = [params.prompt, *((parts.object, parts.background) if decoupled else ())]
    vectors = np.asarray(context.text_embedder().embed_text(phrases), dtype=np.float32)
    scopes = [video_scope(scope) for scope in lookup_scopes(tenant_id, shared_cache=shared_cache)]
    shape = VideoShape(settings.video_family, params.frames, params.width, params.height)
    indexes = (VideoIndex.WHOLE, VideoIndex.OBJECT, VideoIndex.BACKGROUND)[: len(phrases)]
    with session_scope(settings) as session:
        found = video_lookup.nearest_videos(
            session,
            dict(zip(indexes, vectors, strict=True)),
            scopes=scopes,
            shape=shape,
            ef_search=settings.hnsw_ef_search,
            exact_max=settings.lookup_exact_max,
        )
    whole, obj, background = (found.get(index) for index in VideoIndex)
    return routed(settings, params.steps, whole, obj, background)


def video_table(settings: Settings) -> ThresholdTable:
    """NIRVANA's text-to-text table, which FlexCache follows (4.2.1, 0.65 its lowest row), unless the
    operator configured one (REPRISE_K_TABLE), read as a text table: a video's lookups are text lookups
    whatever REPRISE_LOOKUP_MODE says of images, and the 'auto' presets were profiled on image models."""
    return NIRVANA_T2T if settings.k_table == AUTO else table_for(settings.k_table, LookupMode.TEXT_TO_TEXT)


def routed(
    settings: Settings,
    steps: int,
    whole: VideoMatch | None,
    object_match: VideoMatch | None,
    background_match: VideoMatch | None,
) -> Admitted:
    """FlexCache's choice over the three matches, in the table's T = 50 scale (module doc)."""
    to_profiled = {k: round(k * PROFILED_STEPS / steps) for k in range(1, steps)}

    def profiled(match: VideoMatch | None) -> Match | None:
        if match is None:
            return None
        return Match(
            match.entry_id, match.similarity, [to_profiled[k] for k in match.stored_ks if k in to_profiled]
        )

    hit: VideoHit | None = choose_video_hit(
        profiled(whole),
        profiled(object_match),
        profiled(background_match),
        video_table(settings),
        settings.quality_knob,
    )
    if hit is None:
        best = max(
            (m.similarity for m in (whole, object_match, background_match) if m is not None), default=None
        )
        return Admitted(AdmissionDecision(AdmissionOutcome.SEARCHED_MISS, Route.MISS, similarity=best))
    stored = [
        set(m.stored_ks) for m in (whole, object_match, background_match) if m and m.entry_id in hit.entry_ids
    ]
    k = max(k for k in set.intersection(*stored) if to_profiled[k] == hit.k)  # the stored k chosen
    decision = AdmissionDecision(
        AdmissionOutcome.HIT,
        Route.HIT,
        k=k,
        similarity=hit.similarity,
        source_entry_id=hit.object_entry,
    )
    background = hit.background_entry if hit.kind is HitKind.DECOUPLED else None
    return Admitted(decision, video_hit=hit.kind, background_entry_id=background)
