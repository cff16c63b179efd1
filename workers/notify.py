"""Queue a job's webhook event when the job asked for it."""

from __future__ import annotations

import logging
import uuid

import redis

from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.jobs import job_by_id
from jobs.job_events import announce_end, announce_started
from jobs.webhooks import wants_event
from workers.context import WorkerContext
from workers.stages import stage

log = logging.getLogger(__name__)


def notify(
    context: WorkerContext, job_id: uuid.UUID, event: WebhookEvent, *, wanted: bool | None = None
) -> None:
    """Queue the job's webhook event if it asked for it; a completion is also announced to the API
    requests holding open until the job ends (jobs.job_events). `wanted`: whether the job asked for the
    event, when the caller read its webhook already (workers.job.JobView.wants); None reads the job."""
    with stage("notify"):
        _notify(context, job_id, event, wanted)


def _notify(context: WorkerContext, job_id: uuid.UUID, event: WebhookEvent, wanted: bool | None) -> None:
    try:  # to the requests holding open on the job: its end, or its start (an event stream shows it)
        if event is WebhookEvent.COMPLETED:
            announce_end(context.broker(), job_id)
        elif event is WebhookEvent.STARTED:
            announce_started(context.broker(), job_id)
    except redis.RedisError:  # they look at the job row again within seconds anyway
        log.warning("could not announce %s of job %s", event.value, job_id, exc_info=True)
    if wanted is None:
        with session_scope(context.settings) as session:
            job = job_by_id(session, job_id)
            wanted = (
                job is not None
                and job.webhook_url is not None
                and wants_event(job.webhook_events_filter, event)
            )
    if not wanted:
        return
    try:
        context.dispatcher.deliver_webhook(job_id, event)
    except Exception:  # the broker is down: the reconciler sends undelivered events later
        log.exception("could not queue webhook %s for job %s", event.value, job_id)
