"""Figures read from the stores at scrape time: each queue's depth from the broker, what the cache holds
from Postgres, the jobs not yet ended. The cache's sums scan its tables, so they are read at most every
FOOTPRINT_EVERY_S whatever the scrape interval, and the last reading is exported in between."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Final

import redis
from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.vocabulary import JobStatus
from db.footprint import ScopeFootprint, cache_footprint
from db.models import Job
from jobs.queues import Queue, queue_depth

FOOTPRINT_EVERY_S: Final = 30.0
IN_FLIGHT: Final = (JobStatus.STARTING, JobStatus.PROCESSING)

_footprint: list[tuple[float, list[ScopeFootprint]]] = []  # this process's last reading: (when, what)


def queue_depths(client: redis.Redis) -> dict[str, int]:
    """Tasks waiting per queue the broker answered for (decode nodes' queues are the read path's)."""
    depths = {}
    for queue in Queue:
        if queue is Queue.DECODE:
            continue  # a decode node consumes decode.<node>, counted per node by the read path's metrics
        depth = queue_depth(client, queue)
        if depth is not None:
            depths[queue.value] = depth
    return depths


def jobs_in_flight(session: Session) -> dict[str, int]:
    """Jobs per status not yet ended, every such status present."""
    counts = dict(
        session.execute(
            select(Job.status, func.count())
            .where(Job.status.in_([s.value for s in IN_FLIGHT]))
            .group_by(Job.status)
        ).all()
    )
    return {status.value: int(counts.get(status.value, 0)) for status in IN_FLIGHT}


def recent_footprint(session: Session) -> list[ScopeFootprint]:
    """The cache's footprint, read again once the last reading is FOOTPRINT_EVERY_S old."""
    now = time.monotonic()
    if not _footprint or now - _footprint[0][0] >= FOOTPRINT_EVERY_S:
        _footprint[:] = [(now, cache_footprint(session))]
    return _footprint[0][1]


def store_families(
    depths: Mapping[str, int], in_flight: Mapping[str, int], footprint: Sequence[ScopeFootprint]
) -> list[Metric]:
    queue = GaugeMetricFamily(
        "reprise_queue_depth",
        "Tasks waiting on each queue (decode nodes' own queues: reprise_read_queue_depth).",
        labels=["queue"],
    )
    for name, depth in depths.items():
        queue.add_metric([name], depth)
    jobs = GaugeMetricFamily(
        "reprise_jobs_in_flight",
        "Jobs not ended: starting (queued for admission or a GPU) and processing.",
        labels=["status"],
    )
    for status, count in in_flight.items():
        jobs.add_metric([status], count)
    cache_bytes = GaugeMetricFamily(
        "reprise_cache_bytes",
        "Bytes the cache stores, by scope kind (shared, tenant) and tier (final latents, intermediate "
        "states).",
        labels=["scope", "tier"],
    )
    entries = GaugeMetricFamily(
        "reprise_cache_entries", "Cache entries, by scope kind (shared, tenant).", labels=["scope"]
    )
    for scope in footprint:
        entries.add_metric([scope.scope], scope.entries)
        cache_bytes.add_metric([scope.scope, "final"], scope.final_bytes)
        cache_bytes.add_metric([scope.scope, "states"], scope.state_bytes)
    return [queue, jobs, cache_bytes, entries]
