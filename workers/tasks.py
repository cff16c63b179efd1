"""Celery task declarations. Each body is one call to a plain, tested function."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Task
from celery.exceptions import Reject

from core.errors import LeaseBusy, NotThisPool
from jobs.celery_app import get_celery_app
from jobs.maintenance import evict_all_scopes, retrain_predictors
from jobs.pool_control import PoolControl
from jobs.queues import Queue, TaskName
from jobs.webhooks import WebhookEvent
from workers.admission import admit
from workers.context import WorkerContext, get_context
from workers.decoding import decode_job_image
from workers.generation import generate_job, reuse_job
from workers.pool_role import enter_pool
from workers.rebalance import rebalance_pools
from workers.reconcile import reconcile
from workers.webhook_delivery import run_delivery

app = get_celery_app()

# A held lease means another delivery of the same job is running: wait for it, a bounded number of times.
LEASE_RETRIES = 20


@app.task(name=TaskName.ADMIT.value, queue=Queue.ADMIT.value)
def admit_task(job_id: str) -> None:
    admit(get_context(), uuid.UUID(job_id))


@app.task(name=TaskName.GENERATE.value, queue=Queue.CACHE_MISS.value, bind=True, max_retries=LEASE_RETRIES)
def generate_task(self: Task[Any, Any], job_id: str) -> None:
    context = _pool_context(Queue.CACHE_MISS)
    try:
        generate_job(context, uuid.UUID(job_id))
    except LeaseBusy as busy:
        raise self.retry(countdown=busy.retry_in_s) from None


@app.task(name=TaskName.REUSE.value, queue=Queue.CACHE_HIT.value, bind=True, max_retries=LEASE_RETRIES)
def reuse_task(self: Task[Any, Any], job_id: str) -> None:
    context = _pool_context(Queue.CACHE_HIT)
    try:
        reuse_job(context, uuid.UUID(job_id))
    except LeaseBusy as busy:
        raise self.retry(countdown=busy.retry_in_s) from None


def _pool_context(queue: Queue) -> WorkerContext:
    """The context, hosting the worker's current pool role; a task the worker was moved away from
    goes back to the broker unrun, for the pool that takes it (workers.pool_role)."""
    context = get_context()
    try:
        enter_pool(context, queue)
    except NotThisPool as moved:
        raise Reject(str(moved), requeue=True) from None
    return context


@app.task(name=TaskName.DECODE_IMAGE.value, queue=Queue.DECODE.value)
def decode_image_task(job_id: str, fmt: str) -> None:
    decode_job_image(get_context(), uuid.UUID(job_id), fmt)


@app.task(name=TaskName.DELIVER_WEBHOOK.value, queue=Queue.WEBHOOKS.value)
def deliver_webhook_task(job_id: str, event: str, attempt: int = 1) -> None:
    run_delivery(
        settings=get_context().settings, job_id=uuid.UUID(job_id), event=WebhookEvent(event), attempt=attempt
    )


@app.task(name=TaskName.EVICT.value, queue=Queue.MAINTENANCE.value)
def evict_task() -> None:
    context = get_context()
    evict_all_scopes(context.settings, context.blobs)


@app.task(name=TaskName.RETRAIN_PREDICTORS.value, queue=Queue.MAINTENANCE.value)
def retrain_predictors_task() -> None:
    retrain_predictors(get_context().settings)


@app.task(name=TaskName.RECONCILE.value, queue=Queue.MAINTENANCE.value)
def reconcile_task() -> None:
    reconcile(get_context().settings)


@app.task(name=TaskName.REBALANCE_POOLS.value, queue=Queue.MAINTENANCE.value)
def rebalance_pools_task() -> None:
    rebalance_pools(get_context().settings, PoolControl(app))
