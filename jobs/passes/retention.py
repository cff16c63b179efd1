"""The retention pass: deleted jobs' outputs, and with REPRISE_RETENTION_DAYS every output older than
that, leave the blob store, the cache index and the decode nodes' caches (db.outputs)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import redis

from core.settings import Settings
from db.blobs.base import BlobStore
from db.engine import session_scope
from db.outputs import jobs_to_purge, purge_outputs
from jobs.broker import broker_client
from jobs.dispatch import Dispatcher
from jobs.read_routing import forget_everywhere

log = logging.getLogger(__name__)

BATCH = 200  # jobs per pass: a backlog drains over a few beat periods without one long transaction


def purge_due_outputs(
    settings: Settings, blobs: BlobStore, dispatcher: Dispatcher, *, now: datetime | None = None
) -> int:
    """Purge the outputs of deleted jobs and of jobs finished before the retention cut-off; how many."""
    cutoff = None
    if settings.retention_days is not None:
        cutoff = (now or datetime.now(UTC)) - timedelta(days=settings.retention_days)
    with session_scope(settings) as session:
        due = jobs_to_purge(session, finished_before=cutoff, limit=BATCH)
    client = broker_client(settings)
    for job_id in due:
        with session_scope(settings) as session:
            purge_outputs(session, blobs, job_id)
        try:
            forget_everywhere(client, dispatcher, job_id, heartbeat_s=settings.read_heartbeat_s)
        except redis.RedisError:
            log.warning("could not tell the decode nodes to forget job %s", job_id, exc_info=True)
    if due:
        log.info("retention: purged the outputs of %d jobs", len(due))
    return len(due)
