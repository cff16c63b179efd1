"""Video cache entries (FlexCache): their rows, and the guarded read a video hit makes of
its source.

A video entry lives in a "video:" scope (core.scopes.video_scope) and holds, besides the columns of an
image entry, its frames, its prompt's object and background embeddings (FlexCache 4.2.1: decoupled
lookup) and two blobs of its own: the base its compressed states decode against (db.codec.video, 4.1)
and its final video's 1-bit object mask (4.2.2, 4.3). Each state (entry, k) is one compressed blob and
one row, evicted one by one (LRBU, 4.2.3). The entry's `bytes` count its own blobs (final latent, base,
mask); each state's row counts its blob.

Functions take the caller's session, flush but do not commit: the caller owns the transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from core.errors import BlobNotFound, SourceVanished
from core.scopes import is_video_scope
from core.usage import INSERTION_USES
from core.vocabulary import EntryState
from db.blobs.base import BlobStore
from db.cache import Embedding, as_vector, get_live_entry, get_state
from db.models import CacheEntry, CacheState


@dataclass(frozen=True, slots=True)
class VideoSource:
    """What a video hit reads of one source entry: its state at k and its base (decode them with
    db.codec.video.decode_video_state), its object mask (None when it keeps none), and the shape and
    schedule of the run that made it, which the hit's own must match."""

    state: bytes
    base: bytes
    mask: bytes | None
    frames: int
    width: int
    height: int
    steps: int
    model_family: str


def insert_video_entry(
    session: Session,
    *,
    entry_id: uuid.UUID,
    scope: str,
    model_family: str,
    prompt: str,
    prompt_key: str | None,
    text_embedding: Embedding,
    object_embedding: Embedding | None,
    background_embedding: Embedding | None,
    frames: int,
    width: int,
    height: int,
    steps: int,
    source_job_id: uuid.UUID | None,
    final_latent_key: str | None,
    base_key: str,
    mask_key: str | None,
    bytes: int,
    states: Mapping[int, tuple[str, int]],
) -> CacheEntry:
    """Index a video entry whose blobs are already stored. `entry_id` is the caller's (the blob keys
    contain it); `bytes` counts the entry's own blobs (final latent + base + mask); `states` maps each
    k to its (blob key, blob bytes). Call jobs.passes.eviction.ensure_room first when the scope may be
    full. Raises ValueError for a scope that is not a video scope, a k outside 1..steps-1 or a size
    below one."""
    _check_entry(scope, steps, states, frames, width, height, bytes)
    entry = CacheEntry(
        id=entry_id,
        scope=scope,
        model_family=model_family,
        prompt=prompt,
        prompt_key=prompt_key,
        text_embedding=as_vector(text_embedding),
        object_embedding=None if object_embedding is None else as_vector(object_embedding),
        background_embedding=None if background_embedding is None else as_vector(background_embedding),
        image_embedding=None,
        final_latent_key=final_latent_key,
        base_key=base_key,
        mask_key=mask_key,
        bytes=bytes,
        steps=steps,
        frames=frames,
        width=width,
        height=height,
        source_job_id=source_job_id,
        access_count=INSERTION_USES,
        state=EntryState.LIVE.value,
    )
    entry.states = [
        CacheState(k=k, blob_key=key, bytes=size, access_count=INSERTION_USES)
        for k, (key, size) in sorted(states.items())
    ]
    session.add(entry)
    session.flush()
    return entry


def _check_entry(
    scope: str, steps: int, states: Mapping[int, object], frames: int, width: int, height: int, size: int
) -> None:
    if not is_video_scope(scope):
        raise ValueError(f"video entries live in a video scope (core.scopes.video_scope), not {scope!r}")
    if any(not 1 <= k < steps for k in states):
        raise ValueError(f"every state's k must be in 1..{steps - 1}, got {sorted(states)}")
    if min(frames, width, height) < 1 or size < 0:
        raise ValueError(
            f"frames {frames} and size {width}x{height} must be positive, bytes {size} not negative"
        )


def read_video_source(session: Session, blobs: BlobStore, *, entry_id: uuid.UUID, k: int) -> VideoSource:
    """The state k of a live video entry with its base and mask. SourceVanished when the entry or its
    state is gone (evicted, or dirty), or one of their blobs is: eviction deletes rows, commits, then
    deletes blobs, so a reader can see a row and miss its blob (as db.cache.read_state_blob)."""
    state_row = get_state(session, entry_id=entry_id, k=k)
    entry = get_live_entry(session, entry_id=entry_id)
    if entry.base_key is None or entry.frames is None:
        raise SourceVanished(f"cache entry {entry_id} is no video entry; run the job as a miss")
    try:
        state = blobs.get(state_row.blob_key)
        base = blobs.get(entry.base_key)
        mask = None if entry.mask_key is None else blobs.get(entry.mask_key)
    except BlobNotFound:
        raise SourceVanished(
            f"cache state k={k} of video entry {entry_id} was evicted; run the job as a miss"
        ) from None
    return VideoSource(
        state=state,
        base=base,
        mask=mask,
        frames=entry.frames,
        width=entry.width,
        height=entry.height,
        steps=entry.steps,
        model_family=entry.model_family,
    )
