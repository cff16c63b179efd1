"""Celery task declarations. Each body is one call to a plain, tested function.

A decorator names the task only: the queue it goes on is the route table's (jobs.queues.ROUTES, made
Celery's task_routes by jobs.celery_app)."""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from celery import Task
from celery.exceptions import CeleryError, Reject

from core.errors import LeaseBusy, LeaseLost, NotThisPool
from core.job_errors import public_run_error
from core.vocabulary import Allocator, WebhookEvent
from db.engine import session_scope
from db.job_runs import record_run_error
from jobs.celery_app import get_celery_app
from jobs.passes.eviction import evict_all_scopes
from jobs.passes.index_health import check_indexes
from jobs.passes.quality_guard import run_guard
from jobs.passes.reconcile import reconcile
from jobs.passes.retention import purge_due_outputs
from jobs.passes.retrain import retrain_predictors
from jobs.passes.scope_indexes import check_scope_indexes
from jobs.pools.actuator import PoolActuator
from jobs.pools.diffserve import allocate_cascade
from jobs.pools.rebalance import rebalance_pools
from jobs.queues import ROUTES, TaskName
from workers import decoding
from workers.admission import admit
from workers.audit import audit_hit
from workers.cascade import escalated_job, light_job
from workers.context import WorkerContext, get_context
from workers.generation import generate_job, reuse_job
from workers.role_switch import in_pool
from workers.stages import job_stages
from workers.webhook_delivery import run_delivery

app = get_celery_app()
log = logging.getLogger(__name__)

# A held lease means another delivery of the same job is running: wait for it. The holder renews its
# lease while it runs (workers.lease), at most for the task time limit: so many waits of a lease each.
LEASE_RETRY_SLACK = 3


@app.task(name=TaskName.ADMIT.value)
def admit_task(job_id: str) -> None:
    admit(get_context(), uuid.UUID(job_id))


@app.task(name=TaskName.GENERATE.value, bind=True, max_retries=None)
def generate_task(self: Task[Any, Any], job_id: str) -> None:
    _run_leased(self, TaskName.GENERATE, generate_job, job_id)


@app.task(name=TaskName.REUSE.value, bind=True, max_retries=None)
def reuse_task(self: Task[Any, Any], job_id: str) -> None:
    _run_leased(self, TaskName.REUSE, reuse_job, job_id)


@app.task(name=TaskName.REUSE_LARGE.value, bind=True, max_retries=None)
def reuse_large_task(self: Task[Any, Any], job_id: str) -> None:
    """A hit only the large model's latent family can resume (jobs.queues.hit_task)."""
    _run_leased(self, TaskName.REUSE_LARGE, reuse_job, job_id)


def _run_leased(
    task: Task[Any, Any], name: TaskName, body: Callable[[WorkerContext, uuid.UUID], None], job_id: str
) -> None:
    """Run a GPU task body in its pool's context; while another worker holds the job's lease, retry
    when that lease may have lapsed."""
    context = get_context()
    settings = context.settings
    owner: str | None = None
    try:
        with _in_pool(context, name), context.run_owner() as owner, job_stages():
            body(context, uuid.UUID(job_id))
    except LeaseBusy as busy:
        waits = math.ceil(settings.task_time_limit_s / settings.lease_s) + LEASE_RETRY_SLACK
        raise task.retry(countdown=busy.retry_in_s, max_retries=waits) from None
    except LeaseLost as lost:  # the reconciler sends the job again once its lease has expired
        log.warning("%s", lost)
    except CeleryError:  # Reject, Retry: the broker's business, not the run's failure
        raise
    except Exception as error:  # the run failed: its reason stays with the job, for its last attempt
        if owner is not None:
            _record_run_error(context, uuid.UUID(job_id), owner, error)
        raise


def _record_run_error(context: WorkerContext, job_id: uuid.UUID, owner: str, error: Exception) -> None:
    """The tenant's reading of the run's failure, a code and a sentence (core.job_errors); the exception
    itself goes to the log, with the job's id (and its traceback when the task re-raises it)."""
    log.warning("job %s's run failed: %s: %s", job_id, type(error).__name__, error)
    try:
        with session_scope(context.settings) as session:
            record_run_error(session, job_id, owner=owner, error=public_run_error(error))
    except Exception as unrecorded:  # Postgres may be what failed: the run's failure stands as it is
        log.warning("the error of job %s's run was not recorded: %s", job_id, unrecorded)


@contextmanager
def _in_pool(context: WorkerContext, task: TaskName) -> Iterator[None]:
    """Run the task on the worker's current pool role; a task the worker was moved away from goes back
    to the broker unrun, for the pool that takes it (workers.role_switch)."""
    with ExitStack() as hosting:
        try:
            hosting.enter_context(in_pool(context, ROUTES[task]))
        except NotThisPool as moved:
            raise Reject(str(moved), requeue=True) from None
        yield


@app.task(name=TaskName.AUDIT_HIT.value)
def audit_hit_task(job_id: str, hit_score: float | None, final_key: str) -> None:
    """The quality guard's audit of a hit, on a large worker with nothing else to do (workers.audit)."""
    context = get_context()
    with _in_pool(context, TaskName.AUDIT_HIT):
        audit_hit(context, uuid.UUID(job_id), hit_score, final_key)


@app.task(name=TaskName.GENERATE_LIGHT.value, bind=True, max_retries=None)
def generate_light_task(self: Task[Any, Any], job_id: str) -> None:
    """DiffServe's light stage: the light (small) model, then the discriminator (workers.cascade)."""
    _run_leased(self, TaskName.GENERATE_LIGHT, light_job, job_id)


@app.task(name=TaskName.ESCALATE.value, bind=True, max_retries=None)
def escalate_task(self: Task[Any, Any], job_id: str) -> None:
    """A query the discriminator escalated, on the heavy (large) model."""
    _run_leased(self, TaskName.ESCALATE, escalated_job, job_id)


@app.task(name=TaskName.READ_IMAGE.value)
def read_image_task(request: dict[str, Any]) -> None:
    """One image read on this decode node (LatentBox 4): tiers, else decode; the answer goes to Redis."""
    decoding.read_image(get_context(), request)


@app.task(name=TaskName.WRITE_BACK.value)
def write_back_task(request: dict[str, Any], payload_key: str) -> None:
    decoding.write_back(get_context(), request, payload_key)


@app.task(name=TaskName.FORGET_IMAGES.value)
def forget_images_task(job_id: str) -> None:
    decoding.forget_images(get_context(), job_id)


@app.task(name=TaskName.DELIVER_WEBHOOK.value)
def deliver_webhook_task(job_id: str, event: str, attempt: int = 1, probe: bool = False) -> None:
    context = get_context()
    run_delivery(
        settings=context.settings,
        job_id=uuid.UUID(job_id),
        event=WebhookEvent(event),
        attempt=attempt,
        dispatcher=context.dispatcher,
        broker=context.broker(),
        probe=probe,
    )


@app.task(name=TaskName.EVICT.value)
def evict_task() -> None:
    context = get_context()
    evict_all_scopes(context.settings, context.blobs)


@app.task(name=TaskName.RETRAIN_PREDICTORS.value)
def retrain_predictors_task() -> None:
    retrain_predictors(get_context().settings)


@app.task(name=TaskName.RECONCILE.value)
def reconcile_task() -> None:
    context = get_context()
    reconcile(context.settings, context.dispatcher, context.broker())


@app.task(name=TaskName.PURGE_OUTPUTS.value)
def purge_outputs_task() -> None:
    context = get_context()
    purge_due_outputs(context.settings, context.blobs, context.dispatcher)


@app.task(name=TaskName.REBALANCE_POOLS.value)
def rebalance_pools_task() -> None:
    """The one controller of the pools REPRISE_ALLOCATOR names: MoDM's monitor or DiffServe's MILP."""
    settings = get_context().settings
    if settings.allocator is Allocator.DIFFSERVE:
        allocate_cascade(settings, PoolActuator(app))
    else:
        rebalance_pools(settings, PoolActuator(app))


@app.task(name=TaskName.GUARD_QUALITY.value)
def guard_quality_task() -> None:
    """The quality guard's pass (jobs.passes.quality_guard): the k table held to the drop target."""
    run_guard(get_context().settings)


@app.task(name=TaskName.CHECK_INDEXES.value)
def check_indexes_task() -> None:
    settings = get_context().settings
    check_scope_indexes(settings)
    check_indexes(settings)
