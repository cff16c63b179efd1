"""FlexCache's three lookups for a video prompt (papers/flexcache-video-approximate-cache.txt
4.2.1): the nearest live video entry by the whole prompt's embedding, by its object phrase's and by its
background phrase's, each in the video scopes a job may read, of the video model's family and of the
job's frames and size (a latent only continues a run of its own shape).

Each scope is searched as db.cache.lookup searches it (db.lookup_path.choose_path: exactly while it is
small, which a video scope is at FlexCache's scale; its own HNSW index of the whole prompt past that).
The object and background columns have no HNSW index: their search reads the scope's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy.typing as npt
from sqlalchemy import func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from core.vocabulary import EntryState
from db.cache import as_vector
from db.lookup_path import ScopeEf, choose_path
from db.models import CacheEntry, CacheState
from db.scope_indexes import scope_index_name

MAX_SCAN_TUPLES = 20000  # pgvector 0.8's default hnsw.max_scan_tuples


MAX_SCAN_TUPLES = 20000  # pgvector 0.8's default hnsw.max_scan_tuples


class VideoIndex(StrEnum):
    """Which of an entry's embeddings a lookup compares (FlexCache keeps three indexes)."""

    WHOLE = "text_embedding"
    OBJECT = "object_embedding"
    BACKGROUND = "background_embedding"


@dataclass(frozen=True, slots=True)
class VideoMatch:
    """The nearest entry one index found: its id, cosine similarity and the ks it still stores."""

    entry_id: uuid.UUID
    similarity: float
    stored_ks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class VideoShape:
    """What a cached video latent must share with the job it starts: family, frames and size."""

    model_family: str
    frames: int
    width: int
    height: int


def _column(index: VideoIndex) -> InstrumentedAttribute[object]:
    column: InstrumentedAttribute[object] = getattr(CacheEntry, index.value)
    return column


def nearest_video(
    session: Session,
    *,
    index: VideoIndex,
    embedding: npt.ArrayLike,
    scopes: Sequence[str],
    shape: VideoShape,
    ef_search: int = 80,
    exact_max: int = 2000,
) -> VideoMatch | None:
    """The best match in `scopes` by one index, or None when no entry of that shape has the embedding."""
    found = nearest_videos(
        session, {index: embedding}, scopes=scopes, shape=shape, ef_search=ef_search, exact_max=exact_max
    )
    return found[index]


def nearest_videos(
    session: Session,
    embeddings: Mapping[VideoIndex, npt.ArrayLike],
    *,
    scopes: Sequence[str],
    shape: VideoShape,
    ef_search: int = 80,
    exact_max: int = 2000,
) -> dict[VideoIndex, VideoMatch | None]:
    """The best match in `scopes` by each index given: the path of a scope is chosen once (one round
    trip), then one query an index."""
    best: dict[VideoIndex, VideoMatch | None] = dict.fromkeys(embeddings)
    for scope in dict.fromkeys(scopes):
        ef = ScopeEf(ef_search, 0, scope_index_name(scope, VideoIndex.WHOLE.value))  # ef fixed: small scopes
        choose_path(session, scope, exact_max, ef, MAX_SCAN_TUPLES)
        for index, embedding in embeddings.items():
            found = _nearest_in_scope(session, index, embedding, scope, shape)
            current = best[index]
            if found is not None and (current is None or found.similarity > current.similarity):
                best[index] = found
    return best


def _nearest_in_scope(
    session: Session, index: VideoIndex, embedding: npt.ArrayLike, scope: str, shape: VideoShape
) -> VideoMatch | None:
    column = _column(index)
    distance = column.cosine_distance(as_vector(embedding))
    ks = select(func.array_agg(CacheState.k)).where(CacheState.entry_id == CacheEntry.id).scalar_subquery()
    row = session.execute(
        select(CacheEntry.id, distance.label("distance"), ks.label("ks"))
        .where(
            CacheEntry.scope == scope,
            CacheEntry.state == EntryState.LIVE.value,
            CacheEntry.model_family == shape.model_family,
            CacheEntry.frames == shape.frames,
            CacheEntry.width == shape.width,
            CacheEntry.height == shape.height,
            column.is_not(None),
        )
        .order_by(distance)
        .limit(1)
    ).one_or_none()
    if row is None:
        return None
    return VideoMatch(row.id, 1.0 - float(row.distance), tuple(sorted(int(k) for k in row.ks or ())))
