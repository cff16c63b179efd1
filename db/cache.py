"""The cache index in Postgres: nearest-neighbour lookup (pgvector HNSW), insertion, use counters,
and the guarded reads a hit makes of its source.

Scopes: "tenant:<uuid>" per tenant, and "shared" for tenants that opted in; a lookup names the
scopes it may see (core.scopes.lookup_scopes), so one tenant's entries never reach another unless both opted
in to the shared scope. Only live entries are found; an entry being evicted is dirty and invisible.

Functions take the caller's session, flush but do not commit: the caller owns the transaction.
Eviction, which must commit before deleting blobs, lives in db/eviction.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    ColumnElement,
    func,
    literal,
    select,
    text,
    update,
)
from sqlalchemy import delete as sa_delete
from sqlalchemy import insert as sa_insert
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql import Subquery

from core.errors import BlobNotFound, SourceVanished
from core.usage import INSERTION_USES
from core.vocabulary import EntryState, LookupMode
from db.blobs.base import BlobStore
from db.engine import engine_for
from db.lookup_path import EF_SEARCH_MAX, ScopeEf, bounded_count, choose_path
from db.models import CacheEntry, CacheState
from db.scope_indexes import scope_index_name

Embedding = npt.ArrayLike


@dataclass(frozen=True, slots=True)
class LookupResult:
    """The nearest live entry: similarity = 1 - cosine distance; stored_ks = its states left, ascending."""

    entry_id: uuid.UUID
    similarity: float
    stored_ks: tuple[int, ...]
    scope: str
    model_family: str
    final_latent_key: str | None
    path: str = "index"  # a LookupPath: how it was found


class LookupPath(StrEnum):
    INDEX = "index"  # the HNSW walk
    EXACT = "exact"  # the small scope's exact scan
    PROMPT = "prompt"  # the identical prompt's key: no embedding at all


@dataclass(frozen=True, slots=True)
class NewState:
    """An intermediate latent already written to the blob store under blob_key."""

    k: int
    blob_key: str
    bytes: int


def as_vector(embedding: Embedding) -> npt.NDArray[np.float32]:
    """An embedding as the float32 vector pgvector takes; ValueError for an empty or non-finite one."""
    vector = np.asarray(embedding, dtype=np.float32).ravel()
    if vector.size == 0 or not np.all(np.isfinite(vector)):
        raise ValueError("an embedding must be a non-empty vector of finite numbers")
    return vector


def _embedding_column(mode: LookupMode) -> InstrumentedAttribute[object]:
    if mode is LookupMode.TEXT_TO_TEXT:
        return CacheEntry.text_embedding
    return CacheEntry.image_embedding


def _nearest(
    session: Session,
    *,
    query_embedding: Embedding,
    mode: LookupMode,
    scopes: Sequence[str],
    model_family: str | None,
    size: tuple[int, int] | None = None,
) -> LookupResult | None:
    if not scopes:
        return None
    column = _embedding_column(mode)
    distance = column.cosine_distance(as_vector(query_embedding))
    filters: list[ColumnElement[bool]] = [
        CacheEntry.scope.in_(list(scopes)),
        CacheEntry.state == EntryState.LIVE.value,
        column.is_not(None),
    ]
    if model_family is not None:
        filters.append(CacheEntry.model_family == model_family)
    if size is not None:  # a latent only continues a run of its own spatial shape
        filters.extend((CacheEntry.width == size[0], CacheEntry.height == size[1]))
    best = (
        select(
            CacheEntry.id,
            distance.label("distance"),
            CacheEntry.scope,
            CacheEntry.model_family,
            CacheEntry.final_latent_key,
        )
        .where(*filters)
        .order_by(distance)
        .limit(1)
        .subquery()
    )
    return _with_states(session, best, LookupPath.INDEX)


def _with_states(session: Session, best: Subquery, path: LookupPath) -> LookupResult | None:
    """The entry of a one-row subquery (id, distance, scope, model_family, final_latent_key), with the
    states it holds, read in the same statement."""
    ks = select(func.array_agg(CacheState.k)).where(CacheState.entry_id == best.c.id).scalar_subquery()
    row = session.execute(select(best, ks.label("ks"))).one_or_none()
    if row is None:
        return None
    return LookupResult(
        entry_id=row.id,
        similarity=1.0 - float(row.distance),
        stored_ks=tuple(sorted(int(k) for k in row.ks or ())),
        scope=row.scope,
        model_family=row.model_family,
        final_latent_key=row.final_latent_key,
        path=path,
    )


def _set_local(session: Session, values: Mapping[str, str]) -> None:
    """SET LOCAL each setting (this transaction only), in one round trip."""
    session.execute(select(*(func.set_config(name, value, True) for name, value in values.items())))


def lookup(
    session: Session,
    *,
    query_embedding: Embedding,
    mode: LookupMode,
    scopes: Sequence[str],
    model_family: str | None,
    ef_search: int,
    size: tuple[int, int] | None = None,
    exact_max: int = 0,
    max_scan_tuples: int = 20000,
    ef_reference_entries: int = 0,
) -> LookupResult | None:
    """The nearest live entry in `scopes` (and `model_family`; None: any family, for reuse of final
    images across models) by cosine distance, or None when there is none.

    Each scope is searched on its own, the best answer wins. A scope holding at most `exact_max` live
    entries is scanned exactly (its rows through the scope index, sorted by distance: a few ms, and never
    an empty answer). A larger one walks its own HNSW index when beat has built one (db/scope_indexes.py),
    else the shared one with the filters applied while it is walked (hnsw.iterative_scan = strict_order,
    pgvector 0.8, up to `max_scan_tuples` tuples); ef_search is set for this transaction only, and
    grows with the scope past `ef_reference_entries` when its own index is walked (see scaled_ef).
    Image mode compares the query with cached image embeddings (MoDM 5.2); entries without one
    are skipped. `size` (width, height) keeps only entries generated at that size: a cached latent
    continues only a run of its own spatial shape.
    """
    if not 1 <= ef_search <= EF_SEARCH_MAX:
        raise ValueError(f"ef_search must be in 1..{EF_SEARCH_MAX} (pgvector's range), got {ef_search}")
    best: LookupResult | None = None
    for scope in dict.fromkeys(scopes):  # scope by scope: each may have an index of its own
        ef = ScopeEf(ef_search, ef_reference_entries, scope_index_name(scope, _embedding_column(mode).key))
        exact = choose_path(session, scope, exact_max, ef, max_scan_tuples)
        found = _nearest(
            session,
            query_embedding=query_embedding,
            mode=mode,
            scopes=[scope],
            model_family=model_family,
            size=size,
        )
        if found is not None and exact:
            found = replace(found, path=LookupPath.EXACT)
        if found is not None and (best is None or found.similarity > best.similarity):
            best = found
    return best


def scope_size_at_most(session: Session, scopes: Sequence[str], limit: int) -> bool:
    """Whether `scopes` hold at most `limit` live entries: a bounded question, whatever their size."""
    return int(session.execute(bounded_count(scopes, limit)).scalar_one()) <= limit


def lookup_exact(
    session: Session,
    *,
    query_embedding: Embedding,
    mode: LookupMode,
    scopes: Sequence[str],
    model_family: str | None,
    size: tuple[int, int] | None = None,
) -> LookupResult | None:
    """The same question as `lookup`, answered by an exact scan (no HNSW walk: the scope's rows by a
    bitmap scan of the scope index, sorted by distance): small scopes' path and the benchmark's truth."""
    _set_local(session, {"enable_indexscan": "off"})
    try:
        found = _nearest(
            session,
            query_embedding=query_embedding,
            mode=mode,
            scopes=scopes,
            model_family=model_family,
            size=size,
        )
        return None if found is None else replace(found, path=LookupPath.EXACT)
    finally:
        _set_local(session, {"enable_indexscan": "on"})


def lookup_prompt(
    session: Session,
    *,
    prompt_key: str,
    scopes: Sequence[str],
    model_family: str | None,
    size: tuple[int, int],
) -> LookupResult | None:
    """A live entry of `scopes` made from the identical request (core.prompt_key), similarity 1; None
    when there is none. One probe of ix_cache_entries_scope_prompt_key, before any embedding."""
    if not scopes:
        return None
    filters: list[ColumnElement[bool]] = [
        CacheEntry.scope.in_(list(scopes)),
        CacheEntry.prompt_key == prompt_key,
        CacheEntry.state == EntryState.LIVE.value,
        CacheEntry.width == size[0],
        CacheEntry.height == size[1],
    ]
    if model_family is not None:
        filters.append(CacheEntry.model_family == model_family)
    columns = (CacheEntry.scope, CacheEntry.model_family, CacheEntry.final_latent_key)
    best = (
        select(CacheEntry.id, literal(0.0).label("distance"), *columns)
        .where(*filters)
        .order_by(CacheEntry.created_at.desc())
        .limit(1)
        .subquery()
    )
    return _with_states(session, best, LookupPath.PROMPT)


def insert_entry(
    session: Session,
    *,
    entry_id: uuid.UUID,
    scope: str,
    model_family: str,
    prompt: str,
    text_embedding: Embedding | None,
    image_embedding: Embedding | None,
    final_latent_key: str | None,
    final_bytes: int,
    steps: int,
    states: Sequence[NewState],
    source_job_id: uuid.UUID | None = None,
    size: tuple[int, int] = (512, 512),
    prompt_key: str | None = None,
) -> CacheEntry:
    """Index an entry whose blobs are already stored. entry_id is chosen by the caller, since the
    blob keys contain it (db/blobs/keys.py). `final_bytes` counts the entry's own blobs; each
    state counts its own. Call eviction's `ensure_room` first when the scope may be full.
    """
    ks = [state.k for state in states]
    if len(set(ks)) != len(ks):
        raise ValueError(f"states repeat a k: {sorted(ks)}")
    if any(not 1 <= k < steps for k in ks):
        raise ValueError(f"every state's k must be in 1..{steps - 1}, got {sorted(ks)}")
    entry = CacheEntry(
        id=entry_id,
        scope=scope,
        model_family=model_family,
        prompt=prompt,
        prompt_key=prompt_key,
        text_embedding=None if text_embedding is None else as_vector(text_embedding),
        image_embedding=None if image_embedding is None else as_vector(image_embedding),
        final_latent_key=final_latent_key,
        bytes=final_bytes,
        steps=steps,
        width=size[0],
        height=size[1],
        source_job_id=source_job_id,
        access_count=INSERTION_USES,
        state=EntryState.LIVE.value,
    )
    entry.states = [
        CacheState(k=s.k, blob_key=s.blob_key, bytes=s.bytes, access_count=INSERTION_USES) for s in states
    ]
    session.add(entry)
    session.flush()
    return entry


def record_use(session: Session, *, entry_id: uuid.UUID, k: int | None) -> bool:
    """Count one use of the entry and of its state k (None: the final latent only), stamping the
    last access with the transaction's time. Returns False when the entry is gone or dirty (the
    counters of evicted work do not matter); never raises for that.
    """
    touched = session.execute(
        update(CacheEntry)
        .where(CacheEntry.id == entry_id, CacheEntry.state == EntryState.LIVE.value)
        .values(access_count=CacheEntry.access_count + 1, last_access_at=func.now())
        .returning(CacheEntry.id)
    ).first()
    if touched is None:
        return False
    if k is not None:
        session.execute(
            update(CacheState)
            .where(CacheState.entry_id == entry_id, CacheState.k == k)
            .values(access_count=CacheState.access_count + 1, last_access_at=func.now())
        )
    return True


def get_live_entry(session: Session, *, entry_id: uuid.UUID) -> CacheEntry:
    """The entry a hit was routed to, or SourceVanished when it was evicted (gone or dirty)."""
    entry = session.scalars(
        select(CacheEntry).where(CacheEntry.id == entry_id).execution_options(populate_existing=True)
    ).one_or_none()
    if entry is None or entry.state != EntryState.LIVE.value:
        raise SourceVanished(f"cache entry {entry_id} was evicted; run the job as a miss")
    return entry


def get_state(session: Session, *, entry_id: uuid.UUID, k: int) -> CacheState:
    """The state (entry, k) a hit was routed to, or SourceVanished when it (or its entry) was evicted."""
    state = session.scalars(
        select(CacheState)
        .join(CacheEntry, CacheEntry.id == CacheState.entry_id)
        .where(CacheState.entry_id == entry_id, CacheState.k == k, CacheEntry.state == EntryState.LIVE.value)
        .execution_options(populate_existing=True)
    ).one_or_none()
    if state is None:
        raise SourceVanished(f"cache state k={k} of entry {entry_id} was evicted; run the job as a miss")
    return state


def read_state_blob(session: Session, blobs: BlobStore, *, entry_id: uuid.UUID, k: int) -> bytes:
    """The stored latent of (entry, k). SourceVanished if the row or the blob is gone: eviction deletes
    the row, commits, then deletes the blob, so a reader can see the row and miss the blob.
    """
    state = get_state(session, entry_id=entry_id, k=k)
    try:
        return blobs.get(state.blob_key)
    except BlobNotFound:
        raise SourceVanished(
            f"cache state k={k} of entry {entry_id} was evicted; run the job as a miss"
        ) from None


def read_final_latent(session: Session, blobs: BlobStore, *, entry_id: uuid.UUID) -> bytes:
    """The entry's final latent (MoDM's refine source). SourceVanished if the entry or the blob is gone."""
    entry = get_live_entry(session, entry_id=entry_id)
    if entry.final_latent_key is None:
        raise SourceVanished(f"cache entry {entry_id} keeps no final latent; run the job as a miss")
    try:
        return blobs.get(entry.final_latent_key)
    except BlobNotFound:
        raise SourceVanished(f"cache entry {entry_id} was evicted; run the job as a miss") from None


def live_entry_count(session: Session, *, scope: str, model_family: str | None = None) -> int:
    """Live entries of a scope (of one family when given)."""
    query = (
        select(func.count())
        .select_from(CacheEntry)
        .where(CacheEntry.scope == scope, CacheEntry.state == EntryState.LIVE.value)
    )
    if model_family is not None:
        query = query.where(CacheEntry.model_family == model_family)
    return int(session.scalar(query) or 0)


def entry_exists(session: Session, entry_id: uuid.UUID) -> bool:
    """Whether an entry with this id exists, live or dirty (a redelivered miss finds its own)."""
    return session.get(CacheEntry, entry_id) is not None


# --- bulk operations (benchmarks and operators) ------------------------------------------------------


def bulk_insert(
    session: Session, entries: Sequence[Mapping[str, object]], states: Sequence[Mapping[str, object]]
) -> None:
    """Insert entry and state rows as given (column -> value), in two statements: for filling a scope
    in a benchmark. Unlike insert_entry, it neither checks nor counts anything."""
    session.execute(sa_insert(CacheEntry), list(entries))
    if states:
        session.execute(sa_insert(CacheState), list(states))


def drop_scope(session: Session, scope: str) -> None:
    """Delete every entry row of a scope (their states go with them). Blobs are the caller's."""
    session.execute(sa_delete(CacheEntry).where(CacheEntry.scope == scope))


def analyze(settings_url: str) -> None:
    """Vacuum the cache tables and refresh their planner statistics, as autovacuum does after a bulk
    load (Postgres 13+ vacuums after inserts too): the visibility map lets eviction samples read their
    covering indexes alone (migration 0012)."""
    engine = engine_for(settings_url).execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM (ANALYZE) cache_entries"))
        connection.execute(text("VACUUM (ANALYZE) cache_states"))
