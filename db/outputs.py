"""A job's stored outputs, and their removal: by DELETE /v1/generations/{id} and by the retention pass.

A job's outputs are everything stored because of it: its blobs under jobs/<id>/ (the final latent, any
stored image) and the cache entries made from it (entries/<entry id>/: their final and intermediate
latents), which would otherwise keep its prompt and pixels reachable through the cache.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.orm import Session

from core.vocabulary import TERMINAL_STATUSES, EntryState
from db.blobs import keys
from db.blobs.base import BlobStore
from db.models import CacheEntry, Job

TERMINAL = [status.value for status in TERMINAL_STATUSES]


def purge_outputs(session: Session, blobs: BlobStore, job_id: uuid.UUID) -> int:
    """Delete the job's outputs and mark them gone; returns how many blobs were deleted. Idempotent.

    The job's cache entries are marked dirty and committed first, so no lookup reuses them while their
    blobs go; the blobs go next; the rows last. A failure on the way leaves the job to the next pass."""
    entry_ids = list(session.scalars(select(CacheEntry.id).where(CacheEntry.source_job_id == job_id)).all())
    if entry_ids:
        session.execute(
            update(CacheEntry).where(CacheEntry.id.in_(entry_ids)).values(state=EntryState.DIRTY.value)
        )
        session.commit()
    deleted = blobs.delete_prefix(keys.job_prefix(job_id))
    for entry_id in entry_ids:
        deleted += blobs.delete_prefix(keys.entry_prefix(entry_id))
    if entry_ids:
        session.execute(delete(CacheEntry).where(CacheEntry.id.in_(entry_ids)))
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(final_latent_key=None, image_keys={}, outputs_purged_at=func.now())
    )
    return deleted


def jobs_to_purge(session: Session, *, finished_before: datetime | None, limit: int) -> list[uuid.UUID]:
    """Finished jobs whose outputs are still stored though the job was deleted, or finished before
    `finished_before` (the retention cut-off; None: no retention)."""
    due: ColumnElement[bool] = Job.deleted_at.is_not(None)
    if finished_before is not None:
        due = or_(due, Job.finished_at < finished_before)
    query = (
        select(Job.id)
        .where(Job.outputs_purged_at.is_(None), Job.status.in_(TERMINAL), due)
        .order_by(Job.finished_at)
        .limit(limit)
    )
    return list(session.scalars(query).all())


def mark_deleted(session: Session, *, tenant_id: uuid.UUID, job_id: uuid.UUID) -> Job | None:
    """Tombstone the tenant's job (first DELETE wins the time; a repeat keeps it); None: no such job."""
    job = session.scalars(
        select(Job)
        .where(Job.id == job_id, Job.tenant_id == tenant_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if job is None:
        return None
    if job.deleted_at is None:
        job.deleted_at = session.scalar(select(func.now()))
    return job
