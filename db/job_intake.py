"""New jobs written by the API's intake (jobs.intake): one raw INSERT per job on an asyncio psycopg
connection, a batch of them in one pipelined transaction, so that submissions that arrive together share
one commit (and its WAL flush).

Each INSERT takes its tenant's row first (FOR NO KEY UPDATE, as the inflight trigger's UPDATE would) and
inserts only while the tenant has room under its in-flight limit; a job whose Idempotency-Key the
tenant already used is not inserted (ON CONFLICT DO NOTHING). Both are outcomes, not errors, so one
refused job never aborts the others of its batch. Jobs are sorted by tenant, so that two API processes
take tenants' rows in one order and never deadlock.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from core.params import VideoParams, row_values
from core.vocabulary import JobKind, JobStatus, Priority
from db.jobs import NewJob

_COLUMNS = (
    "id, tenant_id, status, prompt, negative_prompt, seed, steps, width, height, guidance, kind, frames, "
    "fps, noise_window, cache_mode, decode_mode, webhook_url, webhook_events_filter, idempotency_key, "
    "request_fingerprint, priority, deadline_s, on_deadline"
)
INSERT_JOB = f"""
WITH room AS (
    SELECT inflight < inflight_limit AS free,
           %(priority)s <> 'high' OR high_limit > (
               SELECT count(*) FROM jobs WHERE tenant_id = %(tenant_id)s AND priority = 'high'
               AND status IN ('starting', 'processing')
           ) AS high_free
    FROM tenants WHERE id = %(tenant_id)s FOR NO KEY UPDATE
), created AS (
    INSERT INTO jobs ({_COLUMNS})
    SELECT %(id)s, %(tenant_id)s, %(status)s, %(prompt)s, %(negative_prompt)s, %(seed)s, %(steps)s,
           %(width)s, %(height)s, %(guidance)s, %(kind)s, %(frames)s, %(fps)s, %(noise_window)s,
           %(cache_mode)s, %(decode_mode)s, %(webhook_url)s, %(webhook_events_filter)s::text[],
           %(idempotency_key)s, %(request_fingerprint)s, %(priority)s, %(deadline_s)s, %(on_deadline)s
    FROM room WHERE room.free AND room.high_free
    ON CONFLICT ON CONSTRAINT uq_jobs_tenant_idempotency_key DO NOTHING
    RETURNING created_at
)
SELECT (SELECT free FROM room), (SELECT high_free FROM room), (SELECT created_at FROM created)
"""
# Taken before a `high` job's INSERT, as a statement of its own: the INSERT's count of the tenant's high
# jobs then reads a snapshot taken once the tenant's row is ours, so no concurrent create is missed.
LOCK_TENANT = "SELECT 1 FROM tenants WHERE id = %(tenant_id)s FOR NO KEY UPDATE"


class Outcome(enum.Enum):
    CREATED = "created"
    KEY_USED = "key_used"  # the tenant's Idempotency-Key names an earlier job: replay it
    NO_ROOM = "no_room"  # the tenant is at its in-flight limit (or no longer exists)
    NO_HIGH_ROOM = "no_high_room"  # a `high` job, and the tenant is at its high_limit


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A checked request, with the id its row will have."""

    tenant_id: uuid.UUID
    new: NewJob
    job_id: uuid.UUID

    def params(self) -> dict[str, Any]:
        video = isinstance(self.new.params, VideoParams)
        return {
            "frames": None,
            "fps": None,
            "noise_window": None,
            **row_values(self.new.params),
            "id": self.job_id,
            "tenant_id": self.tenant_id,
            "status": JobStatus.STARTING.value,
            "kind": JobKind.VIDEO.value if video else JobKind.IMAGE.value,
            "cache_mode": self.new.cache_mode,
            "decode_mode": str(self.new.decode_mode),
            "webhook_url": self.new.webhook_url,
            "webhook_events_filter": list(self.new.webhook_events_filter),
            "idempotency_key": self.new.idempotency_key,
            "request_fingerprint": self.new.request_fingerprint,
            "priority": str(self.new.priority),
            "deadline_s": self.new.deadline_s,
            "on_deadline": str(self.new.on_deadline),
        }


@dataclass(frozen=True, slots=True)
class Written:
    outcome: Outcome
    created_at: datetime | None = None  # the row's, when CREATED


def _outcome(row: tuple[Any, ...] | None) -> Written:
    free, high_free, created_at = row if row is not None else (None, None, None)
    if created_at is not None:
        return Written(Outcome.CREATED, created_at)
    if not free:
        return Written(Outcome.NO_ROOM)
    return Written(Outcome.KEY_USED if high_free else Outcome.NO_HIGH_ROOM)


async def insert_jobs(conn: psycopg.AsyncConnection[Any], jobs: Sequence[PendingJob]) -> list[Written]:
    """Insert `jobs` in one transaction (one INSERT each, pipelined), committed before returning; what
    became of each, in the order given. Raises psycopg.Error when the transaction failed as a whole."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].tenant_id.bytes)
    results: list[Written | None] = [None] * len(jobs)
    async with conn.transaction():
        async with conn.pipeline():
            cursors = []
            for i in order:
                if jobs[i].new.priority == Priority.HIGH:
                    await conn.execute(LOCK_TENANT, {"tenant_id": jobs[i].tenant_id}, prepare=True)
                cursors.append((i, await conn.execute(INSERT_JOB, jobs[i].params(), prepare=True)))
        for i, cursor in cursors:
            results[i] = _outcome(await cursor.fetchone())
    return [written for written in results if written is not None]
