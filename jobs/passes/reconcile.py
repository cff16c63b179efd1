"""The reconcile pass: Postgres is the truth, so work whose message was lost is sent again: running jobs
whose lease expired, jobs left waiting past stuck_after_s whose message the broker no longer holds,
webhook attempts that are due and that no queued task will make, and probes of webhook endpoints
that failed."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

import redis

from core.settings import Settings
from core.vocabulary import FILTER_OF_EVENT, Priority, Route, WebhookEvent
from db import webhooks as webhooks_db
from db.engine import session_scope
from db.job_runs import find_stuck
from jobs.broker import broker_client
from jobs.broker_contents import JOB_QUEUES, jobs_with_messages
from jobs.dispatch import Dispatcher
from jobs.passes.webhook_probes import probe_endpoints
from jobs.queues import Queue

log = logging.getLogger(__name__)


def reconcile(settings: Settings, dispatcher: Dispatcher, broker: redis.Redis | None = None) -> int:
    """Re-enqueue jobs whose message is lost, due webhook retries and probes of failing webhook
    endpoints (jobs.passes.webhook_probes); return how many.

    Lost: a running job whose lease expired, and a job waiting past stuck_after_s that no task message
    in the broker names (jobs.broker_contents; a job queued behind others is left in its place). A
    running job goes to the front of its queue (Dispatcher.resume_route): with a long queue behind it,
    sent at the back it would wait for every job that came after it, and a fault's cost would grow
    with the backlog.
    Duplicates are harmless: admission and the GPU tasks are idempotent on the job id.
    """
    client = broker if broker is not None else broker_client(settings, socket_timeout=5)
    try:
        return _reconcile(settings, dispatcher, client)
    finally:
        if broker is None:
            client.close()


def _reconcile(settings: Settings, dispatcher: Dispatcher, broker: redis.Redis) -> int:
    with session_scope(settings) as session:
        stuck = find_stuck(session, older_than_s=settings.stuck_after_s)
    if any(not job.running for job in stuck):
        held = _held(settings, broker, JOB_QUEUES)
        stuck = [job for job in stuck if job.running or job.job_id not in held]
    for job in stuck:
        if job.admitted and job.route is not None and job.running:  # its run was cut: first in line
            dispatcher.resume_route(job.job_id, Route(job.route), settings)
        elif job.admitted and job.route is not None:
            dispatcher.run_route(job.job_id, Route(job.route), settings, priority=Priority(job.priority))
        else:
            dispatcher.admit(job.job_id, Priority(job.priority))
    if stuck:
        log.warning("reconciler re-enqueued %d stuck jobs", len(stuck))
    try:
        probes = probe_endpoints(settings, dispatcher, broker, now=time.time())
    except redis.RedisError as error:
        log.warning("reconciler: webhook endpoints not probed (%s)", error)
        probes = 0
    return len(stuck) + probes + enqueue_due_retries(settings=settings, dispatcher=dispatcher, broker=broker)


def _held(settings: Settings, broker: redis.Redis | None, queues: Sequence[Queue]) -> set[uuid.UUID]:
    """The jobs a message in `queues` names; none when the broker cannot be read (then everything
    past stuck_after_s is sent again, a duplicate at worst)."""
    client = broker if broker is not None else broker_client(settings, socket_timeout=5)
    try:
        return jobs_with_messages(client, queues, now=time.time(), held_fresh_s=settings.stuck_after_s)
    except redis.RedisError as error:
        log.warning("reconciler: the broker's queues could not be read (%s); re-sending all", error)
        return set()
    finally:
        if broker is None:
            client.close()


BACKFILL_WINDOW = timedelta(days=1)  # how far back the reconciler looks for events never attempted
HAPPENED: dict[WebhookEvent, Literal["started", "finished"]] = {
    WebhookEvent.STARTED: "started",
    WebhookEvent.COMPLETED: "finished",
}


def enqueue_due_retries(
    *,
    settings: Settings,
    dispatcher: Dispatcher,
    now: datetime | None = None,
    broker: redis.Redis | None = None,
) -> int:
    """For the reconciler: queue every delivery attempt that is due and that no queued task will make.

    That is the next attempt of each event whose latest attempt failed: the long waits run_delivery
    left to us, and short retries whose queued task was lost (overdue by stuck_after_s); and the first
    attempt of recent events that were never attempted and whose job no webhook message in the broker
    names (one queued behind a backlog is not lost). Returns how many were queued. A duplicate is
    harmless: deliver_webhook skips an attempt that was already made.
    """
    current = now or datetime.now(UTC)
    with session_scope(settings) as session:
        retries = webhooks_db.due_retries(
            session,
            now=current,
            long_wait_s=settings.visibility_timeout_s / 2,
            overdue_s=settings.stuck_after_s,
        )
        first = [
            (job_id, event)
            for event in WebhookEvent
            for job_id in webhooks_db.never_attempted(
                session,
                event=event.value,
                filter_name=FILTER_OF_EVENT[event].value,
                happened=HAPPENED[event],
                cutoff=current - timedelta(seconds=settings.stuck_after_s),
                since=current - BACKFILL_WINDOW,
            )
        ]
    if first:
        held = _held(settings, broker, (Queue.WEBHOOKS,))
        first = [(job_id, event) for job_id, event in first if job_id not in held]
    for job_id, event, attempt in retries:
        dispatcher.deliver_webhook(job_id, WebhookEvent(event), attempt=attempt + 1)
    for job_id, first_event in first:
        dispatcher.deliver_webhook(job_id, first_event, attempt=1)
    return len(retries) + len(first)
