"""A job as a GPU task body sees it (JobView), of either kind, and its claim for one run.

A task body claims its job (db.job_runs) before any work: a redelivered task waits for the lease or
finds the job ended, so a job is generated and completed once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from core import logs
from core.errors import LeaseBusy
from core.params import GenerationParams, job_params
from core.scopes import uses_shared_scope
from core.vocabulary import DecodeMode, JobKind, Priority, Route, WebhookEvent
from db import jobs as jobs_db
from db.engine import session_scope
from db.job_runs import Claim, ClaimOutcome, claim_run
from db.models import Job
from jobs.webhooks import wants_event
from workers import metrics
from workers.context import WorkerContext
from workers.notify import notify
from workers.stages import stage
from workers.task_signals import current_queue


@dataclass(frozen=True)
class JobView:
    """What a run reads of its job: the request (params: VideoParams for a video job), its cache
    scope, and admission's decision (the source entry and k of a hit)."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    params: GenerationParams
    cache_mode: str
    shared_cache: bool
    k: int | None
    source_entry_id: uuid.UUID | None
    decode_mode: str = DecodeMode.LAZY
    kind: str = JobKind.IMAGE.value
    background_entry_id: uuid.UUID | None = None  # a decoupled video hit's background source
    webhook_url: str | None = None
    webhook_events_filter: tuple[str, ...] = ()
    priority: str = Priority.NORMAL.value  # its messages' broker step (jobs.priority)
    attempt: int = 0  # this run's claim (the job's attempts when claimed): its own blob keys

    @property
    def route(self) -> str:
        """hit when admission found a source to reuse; miss otherwise."""
        return Route.HIT.value if self.source_entry_id is not None else Route.MISS.value

    def wants(self, event: WebhookEvent) -> bool:
        """Whether the request asked for `event` on its webhook (jobs.webhooks.wants_event)."""
        return self.webhook_url is not None and wants_event(self.webhook_events_filter, event)

    @property
    def caches(self) -> bool:
        """Whether the request lets its run fill the cache."""
        return self.cache_mode != "off"


def job_view(session: Session, job: Job) -> JobView:
    """The view of a job row, its parameters of its kind and its scope as its tenant chose."""
    return JobView(
        id=job.id,
        tenant_id=job.tenant_id,
        params=job_params(job),
        cache_mode=job.cache_mode,
        shared_cache=uses_shared_scope(
            tenant_opted_in=jobs_db.tenant_opted_in_to_sharing(session, job.tenant_id),
            cache_mode=job.cache_mode,
        ),
        k=job.k,
        source_entry_id=job.source_entry_id,
        decode_mode=job.decode_mode,
        kind=job.kind,
        background_entry_id=job.background_entry_id,
        webhook_url=job.webhook_url,
        webhook_events_filter=tuple(job.webhook_events_filter or ()),
        priority=job.priority or Priority.NORMAL.value,
        attempt=job.attempts or 0,
    )


def claim_job(
    context: WorkerContext, job_id: uuid.UUID, *, refuse_routes: tuple[str, ...] = ()
) -> JobView | None:
    """The job, claimed for this run; None when there is nothing to run (ended, moved, missing).
    Raises LeaseBusy while another run holds the job's lease."""
    settings = context.settings
    with stage("claim"), session_scope(settings) as session:
        claim: Claim = claim_run(
            session,
            job_id,
            owner=context.owner,
            lease_s=settings.lease_s,
            max_attempts=settings.max_attempts,
            refuse_routes=refuse_routes,
        )
        if claim.outcome is ClaimOutcome.LEASED:
            raise LeaseBusy(claim.retry_in_s)
        if claim.outcome is not ClaimOutcome.CLAIMED or claim.job is None:
            ended_now = claim.outcome in (ClaimOutcome.CANCELED, ClaimOutcome.EXHAUSTED)
            view = None
        else:
            ended_now = False
            view = job_view(session, claim.job)
            first_start = claim.first_start
            admitted_at = claim.job.admitted_at
            logs.bind(job_id=view.id, tenant=view.tenant_id)
    if ended_now:
        notify(context, job_id, WebhookEvent.COMPLETED)
    if view is not None and first_start:
        if admitted_at is not None:
            waited = (datetime.now(UTC) - admitted_at).total_seconds()
            metrics.QUEUE_WAIT.labels(queue=current_queue()).observe(max(waited, 0.0))
        notify(context, job_id, WebhookEvent.STARTED, wanted=view.wants(WebhookEvent.STARTED))
    return view
