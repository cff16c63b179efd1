"""Gauges read from the stores at scrape time: each queue's depth from the broker, what the
cache holds from Postgres, the jobs not yet ended. The cache's sums scan its tables, so they are
refreshed at most every FOOTPRINT_EVERY_S whatever the scrape interval."""

from __future__ import annotations

import time
from typing import Final

import redis
from prometheus_client import Gauge
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.vocabulary import JobStatus
from db.footprint import cache_footprint
from db.models import Job
from jobs.queues import Queue, queue_depth

LATEST: Final = "mostrecent"
FOOTPRINT_EVERY_S: Final = 30.0
IN_FLIGHT: Final = (JobStatus.STARTING, JobStatus.PROCESSING)

QUEUE_DEPTH = Gauge(
    "reprise_queue_depth",
    "Tasks waiting on each queue (decode nodes' own queues: reprise_read_queue_depth).",
    ["queue"],
    multiprocess_mode=LATEST,
)
CACHE_BYTES = Gauge(
    "reprise_cache_bytes",
    "Bytes the cache stores, by scope kind (shared, tenant) and tier (final latents, intermediate states).",
    ["scope", "tier"],
    multiprocess_mode=LATEST,
)
CACHE_ENTRIES = Gauge(
    "reprise_cache_entries",
    "Cache entries, by scope kind (shared, tenant).",
    ["scope"],
    multiprocess_mode=LATEST,
)
JOBS_IN_FLIGHT = Gauge(
    "reprise_jobs_in_flight",
    "Jobs not ended: starting (queued for admission or a GPU) and processing.",
    ["status"],
    multiprocess_mode=LATEST,
)
_footprint_at = [float("-inf")]


def refresh_store_gauges(client: redis.Redis, session: Session) -> None:
    for queue in Queue:
        if queue is Queue.DECODE:
            continue  # a decode node consumes decode.<node>, counted per node by the read path's gauges
        depth = queue_depth(client, queue)
        if depth is not None:
            QUEUE_DEPTH.labels(queue=queue.value).set(depth)
    counts = dict(
        session.execute(
            select(Job.status, func.count())
            .where(Job.status.in_([s.value for s in IN_FLIGHT]))
            .group_by(Job.status)
        ).all()
    )
    for status in IN_FLIGHT:
        JOBS_IN_FLIGHT.labels(status=status.value).set(counts.get(status.value, 0))
    now = time.monotonic()
    if now - _footprint_at[0] < FOOTPRINT_EVERY_S:
        return
    _footprint_at[0] = now
    for footprint in cache_footprint(session):
        CACHE_ENTRIES.labels(scope=footprint.scope).set(footprint.entries)
        CACHE_BYTES.labels(scope=footprint.scope, tier="final").set(footprint.final_bytes)
        CACHE_BYTES.labels(scope=footprint.scope, tier="states").set(footprint.state_bytes)
