"""/v1/generations: submit, read, list and cancel jobs, and fetch their images."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import uuid
import weakref
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL

from api.deps import AppState, BaseUrlDep, BearerDep, SessionDep, StateDep, TenantDep, get_caller
from api.metrics import ENQUEUE_FAILURES, IDEMPOTENT_REPLAYS, JOBS_CREATED, JOBS_REJECTED
from api.problems import Problem
from api.routing import ReleasingRoute
from api.schemas import (
    DEFAULT_FPS,
    DEFAULT_FRAMES,
    VIDEO_FIELDS,
    Generation,
    GenerationCreate,
    GenerationList,
    problem_responses,
)
from api.waiting import preferred_wait
from core import logs
from core.errors import InflightLimitExceeded, InvalidInput
from core.params import GenerationParams, VideoParams, check_params, check_video_params, row_values
from core.vocabulary import TERMINAL_STATUSES, JobKind, JobStatus, WebhookEvent
from db import jobs as jobs_db
from db import outputs
from db.engine import engine_for, session_scope
from db.job_intake import Outcome
from db.models import Job, Tenant
from db.queue_position import queue_view
from jobs.estimates import queued_estimate
from jobs.intake import DatabaseUnavailable, JobIntake, Submitted
from jobs.job_events import announce_end
from jobs.read_routing import forget_everywhere
from jobs.representation import GenerationQueue, generation_object, queue_object
from jobs.webhooks import check_webhook_url, wants_event

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


def _params(body: GenerationCreate, state: AppState) -> GenerationParams:
    """The parameters asked for, defaults filled in and checked (InvalidInput naming the field): a
    VideoParams for kind "video", whose size defaults are the images' (REPRISE_DEFAULT_SIZE)."""
    params = GenerationParams(
        prompt=body.prompt,
        negative_prompt=body.negative_prompt,
        seed=body.seed if body.seed is not None else secrets.randbelow(2**32),
        steps=body.steps if body.steps is not None else state.settings.steps,
        width=body.width if body.width is not None else state.settings.effective_default_size,
        height=body.height if body.height is not None else state.settings.effective_default_size,
        guidance=body.guidance,
    )
    if body.kind == "video":
        video = VideoParams(
            **asdict(params),
            frames=body.frames if body.frames is not None else DEFAULT_FRAMES,
            fps=body.fps if body.fps is not None else DEFAULT_FPS,
            noise_window=body.noise_window,
        )
        check_video_params(video, state.limits)
        return video
    for name in VIDEO_FIELDS:
        if getattr(body, name) is not None:
            raise InvalidInput(f'{name} is for video jobs only: send "kind": "video" with it', field=name)
    check_params(params, state.limits)
    return params


def _check_capacity(state: AppState) -> None:
    """503 while the admit queue is longer than REPRISE_QUEUE_DEPTH_LIMIT. An unreachable broker is
    no reason to refuse: the job waits in Postgres for the reconciler."""
    depth = state.admit_backlog()
    if depth is not None and depth > state.settings.queue_depth_limit:
        raise _overloaded(state, depth)


def _overloaded(state: AppState, depth: int) -> Problem:
    JOBS_REJECTED.labels("backpressure").inc()
    return Problem(
        503,
        f"{depth} jobs are waiting for admission; retry later",
        slug="overloaded",
        headers={"Retry-After": str(state.settings.retry_after_s)},
    )


def _inflight_limited(state: AppState, limit: int) -> Problem:
    JOBS_REJECTED.labels("inflight_limit").inc()
    return Problem(
        429,
        str(InflightLimitExceeded(limit)),
        slug="inflight-limit",
        headers={"Retry-After": str(state.settings.retry_after_s)},
    )


def _new_job(
    body: GenerationCreate, tenant: Tenant, state: AppState, idempotency_key: str | None
) -> jobs_db.NewJob:
    """The job a request asks for, once every check passed (422 naming the field otherwise)."""
    params = _params(body, state)
    if body.cache == "shared" and not tenant.shared_cache:
        raise InvalidInput("this tenant has not opted in to the shared cache", field="cache")
    if body.webhook is not None:
        check_webhook_url(
            body.webhook, allow_hosts=state.settings.webhook_allow_hosts, resolve=state.resolver
        )
    if idempotency_key is not None and "\x00" in idempotency_key:
        raise InvalidInput("Idempotency-Key must not contain NUL characters", field="Idempotency-Key")
    return jobs_db.NewJob(
        params=params,
        cache_mode=body.cache,
        decode_mode=body.decode,
        webhook_url=body.webhook,
        webhook_events_filter=body.events(),
        idempotency_key=idempotency_key,
        request_fingerprint=body.fingerprint() if idempotency_key is not None else None,
    )


def _insert(session: SessionDep, tenant: Tenant, state: AppState, new: jobs_db.NewJob) -> tuple[Job, bool]:
    """Insert and commit the job under the queue's and the tenant's limits (503, 429): (job, created)."""
    _check_capacity(state)
    try:
        result = jobs_db.create_job(session=session, tenant=tenant, new=new)
    except InflightLimitExceeded as error:
        raise _inflight_limited(state, error.limit) from None
    session.commit()
    return result.job, result.created


def _enqueue_admit(state: AppState, job_id: uuid.UUID) -> None:
    try:
        state.dispatcher.admit(job_id)
    except Exception:  # the broker is down: the job stays 'starting' and the reconciler re-enqueues it
        ENQUEUE_FAILURES.labels("admit").inc()
        log.warning("could not enqueue admission of job %s; the reconciler will", job_id, exc_info=True)


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
    if state.settings.intake == "fast":
        generation = await _submit_fast(
            body, tenant, session, state, base, response, idempotency_key, request
        )
    else:
        generation = await run_in_threadpool(
            _submit, body, tenant, session, state, base, response, idempotency_key
        )
    tenant_id = tenant.id

    def reload() -> Job:
        with session_scope(state.settings) as own:
            job = jobs_db.get_job(session=own, tenant_id=tenant_id, job_id=generation.id)
            if job is None:
                raise _not_found(str(generation.id))
            return job

    return await held(state, generation, prefer, response, reload, base)


def intake_of(request: Request, state: AppState) -> JobIntake:
    """The app's fast intake on this event loop (it holds asyncio connections, which belong to one)."""
    intakes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobIntake] | None = getattr(
        request.app.state, "intakes", None
    )
    if intakes is None:
        intakes = request.app.state.intakes = weakref.WeakKeyDictionary()
    loop = asyncio.get_running_loop()
    found = intakes.get(loop)
    if found is None:
        # A loop that ended (a test client runs one per request) gives its connections back at once.
        for ended in [other for other in intakes if other.is_closed()]:
            del intakes[ended]
        found = intakes[loop] = JobIntake(state.settings)
    return found


async def _submit_fast(
    body: GenerationCreate,
    tenant: Tenant,
    session: Session,
    state: AppState,
    base: str,
    response: Response,
    idempotency_key: str | None,
    request: Request,
) -> Generation:
    """The create's work on the event loop (REPRISE_INTAKE=fast, jobs.intake): one INSERT, committed with
    the submissions beside it, then one admit message; the same answers as _submit."""
    intake = intake_of(request, state)
    # 1. Check the request before touching anything (a webhook host name is resolved off the loop).
    if body.webhook is not None and not _literal_host(body.webhook):
        new = await run_in_threadpool(_new_job, body, tenant, state, idempotency_key)
    else:
        new = _new_job(body, tenant, state, idempotency_key)
    backlog = await intake.admit_backlog()
    if backlog is not None and backlog > state.settings.queue_depth_limit:
        raise _overloaded(state, backlog)
    # 2. Insert, or find that the key was used; a replay answers with the first job whatever the limits.
    try:
        submitted = await intake.submit(tenant.id, new)
    except DatabaseUnavailable as error:
        log.warning("could not write a job: %s", error)
        raise Problem(
            503, "the database is unreachable; retry shortly", slug="database-unavailable"
        ) from None
    if submitted.outcome is not Outcome.CREATED:
        replayed = None
        if idempotency_key is not None:
            replayed = await run_in_threadpool(_find_replay, session, tenant, new)
        if replayed is None:
            raise _inflight_limited(state, tenant.inflight_limit)
        IDEMPOTENT_REPLAYS.inc()
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
        generation = generation_object(replayed, base_url=base)
        response.headers["Location"] = generation.urls.self_
        return generation
    # 3. Committed, and its admission queued (or left to the reconciler).
    JOBS_CREATED.inc()
    job = new_job_row(submitted, tenant, new)
    with logs.bound(job_id=job.id, tenant=tenant.id):
        log.info("job created: %s, %d steps at %dx%d", job.kind, job.steps, job.width, job.height)
        if not submitted.queued:
            ENQUEUE_FAILURES.labels("admit").inc()
    generation = generation_object(job, base_url=base)
    response.headers["Location"] = generation.urls.self_
    return generation


def _literal_host(url: str) -> bool:
    """Whether the URL's host is an IP address (no resolver asked), or it is no valid URL at all."""
    try:
        host = urlsplit(url).hostname
        ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return True


def _find_replay(session: Session, tenant: Tenant, new: jobs_db.NewJob) -> Job | None:
    try:
        return jobs_db.find_replay(session=session, tenant_id=tenant.id, new=new)
    finally:
        session.commit()


def new_job_row(submitted: Submitted, tenant: Tenant, new: jobs_db.NewJob) -> Job:
    """The row the fast intake inserted, as the ORM would have loaded it (its defaults filled in)."""
    params = new.params
    video = isinstance(params, VideoParams)
    return Job(
        id=submitted.job_id,
        tenant_id=tenant.id,
        status=JobStatus.STARTING.value,
        **row_values(params),
        kind=JobKind.VIDEO.value if video else JobKind.IMAGE.value,
        cache_mode=new.cache_mode,
        decode_mode=new.decode_mode,
        webhook_url=new.webhook_url,
        webhook_events_filter=list(new.webhook_events_filter),
        idempotency_key=new.idempotency_key,
        request_fingerprint=new.request_fingerprint,
        models_used=[],
        denoiser_evals={},
        admission_ms={},
        image_keys={},
        vae_decodes=0,
        attempts=0,
        cancel_requested=False,
        created_at=submitted.written.created_at,
    )


def _submit(
    body: GenerationCreate,
    tenant: Tenant,
    session: Session,
    state: AppState,
    base: str,
    response: Response,
    idempotency_key: str | None,
) -> Generation:
    """The create's work, in a worker thread: check, insert or replay, enqueue; ends its transaction."""
    # 1. Check the request before touching anything.
    new = _new_job(body, tenant, state, idempotency_key)
    # 2. A replay answers with the first job even when we are busy now.
    replayed = None
    if idempotency_key is not None:
        replayed = jobs_db.find_replay(session=session, tenant_id=tenant.id, new=new)
    if replayed is None:
        job, created = _insert(session, tenant, state, new)
    else:
        job, created = replayed, False
    # 3. Queue it only once it is committed, so a worker never looks for a row that is not there.
    if created:
        JOBS_CREATED.inc()
        with logs.bound(job_id=job.id, tenant=tenant.id):
            log.info("job created: %s, %d steps at %dx%d", job.kind, job.steps, job.width, job.height)
            _enqueue_admit(state, job.id)
    else:
        IDEMPOTENT_REPLAYS.inc()
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    generation = generation_object(job, base_url=base)
    response.headers["Location"] = generation.urls.self_
    session.commit()  # a replay's lookup: no connection held while the request waits
    return generation


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
