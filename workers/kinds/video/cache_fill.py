"""Filling the video cache from a finished video job (FlexCache 3.2 and 4.2.4): its captured
states compressed (db.codec.video, 4.1), its object mask (4.2.2), its prompt embedded whole and by
object and background (4.2.1), the entry indexed in the tenant's video scope after LRBU made room under
the video budget (4.2.3)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from core.params import VideoParams
from core.prompt_key import prompt_key
from core.scopes import insert_scope, video_scope
from db import cache
from db.blobs import keys
from db.codec.video import encode_video_states
from db.engine import session_scope
from db.video_entries import insert_video_entry
from jobs.passes import eviction
from jobs.policies.decoupling import split_prompt
from workers import metrics
from workers.context import WorkerContext
from workers.job import JobView
from workers.runtime.results import GenerationResult
from workers.runtime.stitching import object_mask, pack_mask

# A video entry per job, with an id derived from the job: a redelivered run inserts nothing twice.
VIDEO_ENTRY_NAMESPACE = uuid.UUID("0b8f3c1e-7d2a-4f5e-9c61-3a4e8d2b7f90")


def video_entry_id(job_id: uuid.UUID) -> uuid.UUID:
    """The id of the video entry a job inserts."""
    return uuid.uuid5(VIDEO_ENTRY_NAMESPACE, str(job_id))


def insert_video_result(
    context: WorkerContext, job: JobView, params: VideoParams, result: GenerationResult, final_blob: bytes
) -> uuid.UUID | None:
    """Cache the states the run captured (exactly those FlexCache 4.2.4 saves: states_to_save) as a new
    entry of the job's video scope (`params`: the job's); its id, or None when there is no state to
    cache or a previous delivery of the job cached it."""
    settings = context.settings
    if not result.captured:
        return None
    entry_id = video_entry_id(job.id)
    with session_scope(settings) as session:
        if cache.entry_exists(session, entry_id):
            return None
    whole, object_embedding, background_embedding = _embeddings(context, params.prompt)
    with metrics.timed(metrics.CODEC_SECONDS, operation="encode"):
        encoded = encode_video_states(
            result.captured,
            family=result.family,
            threshold=settings.video_key_frame_similarity,
            error_bound=settings.video_state_error_bound,
        )
    own = {  # the entry's own blobs, which its `bytes` count
        keys.video_base_key(entry_id): encoded.base,
        keys.video_mask_key(entry_id): pack_mask(object_mask(result.final_latent)),
        keys.final_latent_key(entry_id): final_blob,
    }
    own_bytes = sum(len(blob) for blob in own.values())
    scope = video_scope(insert_scope(job.tenant_id, shared_cache=job.shared_cache))
    eviction.ensure_room(
        settings,
        context.blobs,
        scope=scope,
        incoming_bytes=own_bytes + sum(len(blob) for blob in encoded.states.values()),
        budget_bytes=settings.video_cache_budget_bytes,
        policy=eviction.VIDEO_EVICTION_POLICY,
    )
    states = _store(context, entry_id, encoded.states, own)
    with session_scope(settings) as session:
        insert_video_entry(
            session,
            entry_id=entry_id,
            scope=scope,
            model_family=result.family,
            prompt=params.prompt,
            prompt_key=prompt_key(params),
            text_embedding=whole,
            object_embedding=object_embedding,
            background_embedding=background_embedding,
            frames=params.frames,
            width=params.width,
            height=params.height,
            steps=result.steps,
            source_job_id=job.id,
            final_latent_key=keys.final_latent_key(entry_id),
            base_key=keys.video_base_key(entry_id),
            mask_key=keys.video_mask_key(entry_id),
            bytes=own_bytes,
            states=states,
        )
    return entry_id


def _embeddings(context: WorkerContext, prompt: str) -> tuple[Any, Any | None, Any | None]:
    """The prompt's embedding, and its object and background phrases' (FlexCache 4.2.1) when it names
    both (jobs.policies.decoupling.split_prompt), else None: in one call of the text embedder."""
    parts = split_prompt(prompt)
    if not parts.decoupled:
        return context.text_embedder().embed_text([prompt])[0], None, None
    whole, object_embedding, background_embedding = context.text_embedder().embed_text(
        [prompt, parts.object, parts.background]
    )
    return whole, object_embedding, background_embedding


def _store(
    context: WorkerContext, entry_id: uuid.UUID, states: Mapping[int, bytes], own: Mapping[str, bytes]
) -> dict[int, tuple[str, int]]:
    """Put the entry's state blobs and its own blobs in the blob store; each state's (key, bytes)."""
    stored: dict[int, tuple[str, int]] = {}
    for k, blob in sorted(states.items()):
        key = keys.video_state_key(entry_id, k)
        context.blobs.put(key, blob)
        stored[k] = (key, len(blob))
    for key, blob in own.items():
        context.blobs.put(key, blob)
    return stored
