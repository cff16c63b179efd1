"""/v1/generations: submit, read, list and cancel jobs, and fetch their images."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL

from api.deps import AppState, BaseUrlDep, BearerDep, SessionDep, StateDep, TenantDep, get_caller
from api.metrics import ENQUEUE_FAILURES
from api.problems import Problem
from api.routing import ReleasingRoute
from api.schemas import (
    Generation,
    GenerationCreate,
    GenerationList,
    problem_responses,
)
from api.submission import submit_request
from api.waiting import preferred_wait
from core.vocabulary import TERMINAL_STATUSES, JobStatus, WebhookEvent
from db import jobs as jobs_db
from db import outputs
from db.engine import engine_for, session_scope
from db.models import Job, Tenant
from db.queue_position import queue_view
from jobs.estimates import queued_estimate
from jobs.job_events import announce_end
from jobs.read_routing import forget_everywhere
from jobs.representation import GenerationQueue, generation_object, queue_object
from jobs.webhooks import wants_event

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/generations", tags=["generations"], route_class=ReleasingRoute)


def _not_found(job_id: str) -> Problem:
    return Problem(404, f"no generation {job_id}", slug="not-found")


def load_job(session: SessionDep, tenant: Tenant, job_id: str) -> Job:
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        raise _not_found(job_id) from None
    job = jobs_db.get_job(session=session, tenant_id=tenant.id, job_id=parsed)
    if job is None:
        raise _not_found(job_id)
    return job


@router.post(
    "",
    status_code=202,
    responses={
        200: {
            "model": Generation,
            "description": "An Idempotency-Key replay: the job the first request created.",
        },
        **problem_responses(400, 401, 413, 422, 429, 503),
    },
)
async def create_generation(
    body: GenerationCreate,
    tenant: TenantDep,
    session: SessionDep,
    state: StateDep,
    base: BaseUrlDep,
    response: Response,
    request: Request,
    prefer: PreferHeader = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            description="Repeat a request safely: the same key and body return the first job (200); the "
            "same key with another body is refused (422).",
        ),
    ] = None,
) -> Generation:
    """Submit a job: 202 with the queued job, or 200 with the first job for a repeated Idempotency-Key;
    with `Prefer: wait=N`, the job once it has ended (or after N seconds)."""
    generation = await submit_request(body, tenant, session, state, base, response, idempotency_key, request)
    tenant_id = tenant.id

    def reload() -> Job:
        with session_scope(state.settings) as own:
            job = jobs_db.get_job(session=own, tenant_id=tenant_id, job_id=generation.id)
            if job is None:
                raise _not_found(str(generation.id))
            return job

    return await held(state, generation, prefer, response, reload, base)


@router.get("", responses=problem_responses(401, 422))
def list_generations(
    tenant: TenantDep,
    session: SessionDep,
    base: BaseUrlDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=100, description="Jobs per page.")] = 20,
    cursor: Annotated[
        str | None, Query(max_length=200, description="The `next` of the previous page.")
    ] = None,
) -> GenerationList:
    """List your jobs, newest first, a page at a time (follow `next`)."""
    after = jobs_db.Cursor.decode(cursor) if cursor is not None else None
    page = jobs_db.list_jobs(session=session, tenant_id=tenant.id, status=status, limit=limit, after=after)
    next_url = None
    if page.next_cursor is not None:
        query = {"limit": str(limit), "cursor": page.next_cursor.encode()}
        if status is not None:
            query["status"] = status.value
        next_url = str(URL(f"{base}{router.prefix}").include_query_params(**query))
    return GenerationList(results=[generation_object(job, base_url=base) for job in page.jobs], next=next_url)


PreferHeader = Annotated[
    str | None,
    Header(
        alias="Prefer",
        description="wait=N (1..60): answer when the job has ended, or after N seconds (RFC 7240); a bare "
        "`wait` waits 60 s. The answer then carries Preference-Applied: wait=N.",
    ),
]


def queue_of(state: AppState, job: Job, session: Session) -> GenerationQueue | None:
    """Where a waiting job stands (position, estimates); None once it runs."""
    if job.status != JobStatus.STARTING:
        return None
    view = queue_view(session, job, large_serves_hits=state.settings.large_serves_hits)
    return queue_object(queued_estimate(view))


def _with_queue(state: AppState, job: Job, base: str) -> Generation:
    with Session(engine_for(state.settings.sqlalchemy_url), expire_on_commit=False) as session:
        return generation_object(job, base_url=base, queue=queue_of(state, job, session))


def authorized_job(state: AppState, credentials: HTTPAuthorizationCredentials | None, job_id: str) -> Job:
    """The caller's job (401 without a valid key, 404 when not the caller's), in a session of its own:
    an async route holds no connection while it waits."""
    with Session(engine_for(state.settings.sqlalchemy_url), expire_on_commit=False) as session:
        return load_job(session, get_caller(credentials, state, session).tenant, job_id)


async def held(
    state: AppState,
    generation: Generation,
    prefer: str | None,
    response: Response,
    reload: Callable[[], Job],
    base: str,
) -> Generation:
    """`generation`, or with `Prefer: wait=N` the job as it is once it has ended or N seconds passed."""
    wait_s = preferred_wait(prefer)
    if wait_s is None:
        return generation
    response.headers["Preference-Applied"] = f"wait={wait_s}"
    if generation.status in TERMINAL_STATUSES:
        return generation
    latest: list[Job] = []

    async def ended() -> bool:
        latest[:] = [await run_in_threadpool(reload)]
        return latest[0].status in TERMINAL_STATUSES

    await state.waiter.hold(str(generation.id), wait_s, ended)
    job = latest[-1] if latest else await run_in_threadpool(reload)
    return await run_in_threadpool(_with_queue, state, job, base)


@router.get("/{job_id}", responses=problem_responses(401, 404))
async def get_generation(
    job_id: str,
    credentials: BearerDep,
    state: StateDep,
    base: BaseUrlDep,
    response: Response,
    prefer: PreferHeader = None,
) -> Generation:
    """Read a job: status, input, output (once succeeded), error and metrics; with `Prefer: wait=N`,
    once it has ended (or after N seconds)."""
    job = await run_in_threadpool(authorized_job, state, credentials, job_id)
    generation = await run_in_threadpool(_with_queue, state, job, base)
    reload = lambda: authorized_job(state, credentials, job_id)  # noqa: E731
    return await held(state, generation, prefer, response, reload, base)


@router.post("/{job_id}/cancel", responses=problem_responses(401, 404))
def cancel_generation(
    job_id: str, tenant: TenantDep, session: SessionDep, state: StateDep, base: BaseUrlDep
) -> Generation:
    """Cancel a job: a queued one at once, a running one at its next step; a finished one stays as is."""
    job = load_job(session, tenant, job_id)
    result = jobs_db.request_cancel(session=session, tenant_id=tenant.id, job_id=job.id)
    if result is None:  # deleted between the two statements
        raise _not_found(job_id)
    session.commit()
    canceled = result.job
    log.info("cancel requested", extra={"job_id": str(canceled.id), "tenant": str(tenant.id)})
    if result.canceled_now:
        with contextlib.suppress(Exception):  # a held reader looks at the row again within seconds
            announce_end(state.redis, canceled.id)
    if (
        result.canceled_now
        and canceled.webhook_url
        and wants_event(canceled.webhook_events_filter, WebhookEvent.COMPLETED)
    ):
        try:
            state.dispatcher.deliver_webhook(canceled.id, WebhookEvent.COMPLETED)
        except Exception:
            ENQUEUE_FAILURES.labels("webhook").inc()
            log.warning("could not enqueue the webhook of canceled job %s", canceled.id, exc_info=True)
    return generation_object(canceled, base_url=base)


@router.delete("/{job_id}", status_code=204, responses=problem_responses(401, 404))
def delete_generation(job_id: str, tenant: TenantDep, session: SessionDep, state: StateDep) -> Response:
    """Delete a job and everything stored because of it: its latent and images, the cache entries made
    from it, and its images in the decode nodes' caches. A running job is canceled first and its outputs
    go once it stops. Idempotent: deleting a deleted job answers 204 again; reading it answers 404."""
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        raise _not_found(job_id) from None
    jobs_db.request_cancel(session=session, tenant_id=tenant.id, job_id=parsed)
    job = outputs.mark_deleted(session, tenant_id=tenant.id, job_id=parsed)
    if job is None:
        raise _not_found(job_id)
    session.commit()
    log.info("job deleted", extra={"job_id": str(job.id), "tenant": str(tenant.id)})
    if job.status in TERMINAL_STATUSES and job.outputs_purged_at is None:
        outputs.purge_outputs(session, state.blob_store, job.id)
        session.commit()
        try:
            forget_everywhere(
                state.redis, state.dispatcher, job.id, heartbeat_s=state.settings.read_heartbeat_s
            )
        except Exception:  # the bytes a node still holds are unreachable: reads check the job first
            log.warning("could not tell the decode nodes to forget job %s", job.id, exc_info=True)
    return Response(status_code=204)
