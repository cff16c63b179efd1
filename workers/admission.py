"""The admit task's body: read the job, let its kind decide (workers.kinds: an image job's lookup and
k, or a video job's three lookups), record the decision, route (DESIGN: the request path)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from core import logs
from core.vocabulary import JobStatus, Priority, Route, WebhookEvent
from db import jobs as jobs_db
from db import stats
from db.engine import session_scope
from db.job_runs import finish, record_admission
from jobs.admission import AdmissionDecision
from jobs.priority import DEADLINE_UNMET, deadline_passed
from jobs.queues import Queue
from workers import metrics
from workers.context import WorkerContext
from workers.job import job_view
from workers.kinds import kind_of
from workers.kinds.base import StageTimer
from workers.notify import notify

log = logging.getLogger(__name__)


def admit(context: WorkerContext, job_id: uuid.UUID) -> AdmissionDecision | None:
    """Decide and route one waiting job. Idempotent: a job already admitted is only re-routed.
    The job's log fields are bound for the call only: a thread of an admit pool, or a caller outside
    Celery, keeps its own context afterwards."""
    with logs.bound():
        if _failed_late(context, job_id):
            return None
        return _admit(context, job_id)


def _failed_late(context: WorkerContext, job_id: uuid.UUID) -> bool:
    """Fail a waiting job whose deadline passed before its admission, when it asked to fail on it
    (jobs.priority.deadline_passed): it could only end late. True when the job is (now) ended so."""
    with session_scope(context.settings) as session:
        job = jobs_db.job_by_id(session, job_id)
        if job is None or job.status != JobStatus.STARTING.value:
            return False
        now = datetime.now(UTC)
        if not deadline_passed(
            created_at=job.created_at, deadline_s=job.deadline_s, on_deadline=job.on_deadline, now=now
        ):
            return False
        late = f"{DEADLINE_UNMET}: its deadline of {job.deadline_s} s passed before it was admitted"
        ended = finish(session, job_id, JobStatus.FAILED, error=late)
    if ended:
        log.info("job %s failed: %s", job_id, late)
        notify(context, job_id, WebhookEvent.COMPLETED)
    return True


def _admit(context: WorkerContext, job_id: uuid.UUID) -> AdmissionDecision | None:
    settings = context.settings
    with session_scope(settings) as session:
        job = jobs_db.job_by_id(session, job_id)
        if job is None or job.status != JobStatus.STARTING.value:
            return None
        if job.admitted_at is not None and job.route is not None:
            # redelivered after routing: the route task dedups
            context.dispatcher.run_route(job_id, Route(job.route), settings, priority=Priority(job.priority))
            return None
        logs.bind(job_id=job.id, tenant=job.tenant_id)
        waited = (datetime.now(UTC) - job.created_at).total_seconds()
        metrics.QUEUE_WAIT.labels(queue=Queue.ADMIT.value).observe(max(waited, 0.0))
        request = job_view(session, job)
        priority = Priority(job.priority)
    timer = StageTimer()
    admitted = kind_of(request.kind).admit(context, request, timer)
    decision = admitted.decision
    timings = timer.finish()
    with session_scope(settings) as session:
        recorded = record_admission(
            session,
            job_id,
            outcome=decision.outcome.value,
            predictor_said_hit=admitted.predicted_hit,
            route=decision.route.value,
            similarity=decision.similarity,
            k=decision.k,
            source_entry_id=decision.source_entry_id,
            admission_ms=timings,
            background_entry_id=admitted.background_entry_id,
            video_hit=admitted.video_hit,
        )
        if recorded:
            stats.record_admission(session, outcome=decision.outcome, k=decision.k)
    if not recorded:  # canceled or admitted by a concurrent delivery meanwhile
        return None
    context.dispatcher.run_route(job_id, decision.route, settings, priority=priority)
    log.info(
        "admitted %s: %s k=%s similarity=%s in %s ms",
        job_id,
        decision.outcome.value,
        decision.k,
        decision.similarity,
        timings,
    )
    return decision
