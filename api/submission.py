"""Submitting a job (POST /v1/generations, and each job of the OpenAI-compatible create): its parameters
checked, the capacity and in-flight limits, the row inserted and its admission queued through the intake
(jobs.intake: one insert and one publish, batched across concurrent submissions). api.routes.generations
holds the route; this module what it does."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import weakref
from dataclasses import asdict
from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import AppState
from api.metrics import ENQUEUE_FAILURES, IDEMPOTENT_REPLAYS, JOBS_CREATED, JOBS_REJECTED
from api.problems import Problem
from api.schemas import (
    DEFAULT_FPS,
    DEFAULT_FRAMES,
    VIDEO_FIELDS,
    Generation,
    GenerationCreate,
)
from core import logs
from core.errors import DatabaseUnavailable, HighPriorityLimitExceeded, InflightLimitExceeded, InvalidInput
from core.params import GenerationParams, VideoParams, check_params, check_video_params, row_values
from core.vocabulary import JobKind, JobStatus, OnDeadline, Priority
from db import jobs as jobs_db
from db.engine import session_scope
from db.job_intake import Outcome
from db.models import Job, Tenant
from db.queue_position import submission_view
from jobs.estimates import queued_estimate
from jobs.intake import JobIntake, Submitted
from jobs.priority import check_deadline
from jobs.representation import generation_object
from jobs.webhooks import check_webhook_url

log = logging.getLogger(__name__)


def job_params_of(body: GenerationCreate, state: AppState) -> GenerationParams:
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


def overloaded(state: AppState, depth: int) -> Problem:
    JOBS_REJECTED.labels("backpressure").inc()
    return Problem(
        503,
        f"{depth} jobs are waiting for admission; retry later",
        slug="overloaded",
        headers={"Retry-After": str(state.settings.retry_after_s)},
    )


def inflight_limited(state: AppState, limit: int) -> Problem:
    JOBS_REJECTED.labels("inflight_limit").inc()
    return Problem(
        429,
        str(InflightLimitExceeded(limit)),
        slug="inflight-limit",
        headers={"Retry-After": str(state.settings.retry_after_s)},
    )


def high_limited(state: AppState, limit: int) -> Problem:
    JOBS_REJECTED.labels("high_priority_limit").inc()
    return Problem(
        429,
        str(HighPriorityLimitExceeded(limit)),
        slug="high-priority-limit",
        headers={"Retry-After": str(state.settings.retry_after_s)},
    )


def refuse_unmeetable(new: jobs_db.NewJob, state: AppState) -> None:
    """422 deadline-unmet when the request asks to fail (`on_deadline: fail`) and the job's estimated
    finish (jobs.estimates over the miss route's queue at its priority and above) is past its deadline:
    answered now, never as a late result. Blocking: two short queries."""
    if new.deadline_s is None or new.on_deadline != OnDeadline.FAIL:
        return
    with session_scope(state.settings) as session:
        view = submission_view(session, Priority(new.priority))
    finish_s = queued_estimate(view).finish_s
    if check_deadline(
        deadline_s=new.deadline_s, on_deadline=new.on_deadline, estimated_finish_s=finish_s
    ).refused:
        JOBS_REJECTED.labels("deadline_unmet").inc()
        raise Problem(
            422,
            f"the job would end in about {finish_s} s, past its deadline_s of {new.deadline_s} s "
            '(send "on_deadline": "best_effort" to run it anyway)',
            slug="deadline-unmet",
            title="Deadline cannot be met",
            errors=[{"location": "body", "field": "deadline_s", "detail": f"estimated finish {finish_s} s"}],
        )


def new_job(
    body: GenerationCreate, tenant: Tenant, state: AppState, idempotency_key: str | None
) -> jobs_db.NewJob:
    """The job a request asks for, once every check passed (422 naming the field otherwise)."""
    params = job_params_of(body, state)
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
        priority=body.priority,
        deadline_s=body.deadline_s,
        on_deadline=body.on_deadline,
    )


def intake_of(request: Request, state: AppState) -> JobIntake:
    """The app's intake on this event loop (it holds asyncio connections, which belong to one)."""
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


async def submit_request(
    body: GenerationCreate,
    tenant: Tenant,
    session: Session,
    state: AppState,
    base: str,
    response: Response,
    idempotency_key: str | None,
    request: Request,
) -> Generation:
    """The create's work on the event loop (jobs.intake): one INSERT, committed with the submissions
    beside it, then one admit message. 202 with the new job; 200 with the first job of a repeated
    Idempotency-Key, whatever the limits say now; otherwise 503 or 429 past a limit."""
    intake = intake_of(request, state)
    # 1. Check the request before touching anything (a webhook host name is resolved off the loop).
    if body.webhook is not None and not literal_host(body.webhook):
        new = await run_in_threadpool(new_job, body, tenant, state, idempotency_key)
    else:
        new = new_job(body, tenant, state, idempotency_key)
    if new.deadline_s is not None:
        await run_in_threadpool(refuse_unmeetable, new, state)
    backlog = await intake.admit_backlog()
    if backlog is not None and backlog > state.settings.queue_depth_limit:
        replayed = await replay_of(session, tenant, new)  # a replay adds nothing to the backlog
        if replayed is None:
            raise overloaded(state, backlog)
        return replay_answer(replayed, base, response)
    # 2. Insert, or find that the key was used; a replay answers with the first job whatever the limits.
    submitted = await write(intake, tenant, new, state)
    if submitted.outcome is not Outcome.CREATED:
        replayed = await replay_of(session, tenant, new)
        if replayed is None and submitted.outcome is Outcome.NO_HIGH_ROOM:
            raise high_limited(state, tenant.high_limit)
        if replayed is None:
            raise inflight_limited(state, tenant.inflight_limit)
        return replay_answer(replayed, base, response)
    # 3. Committed, and its admission queued (or left to the reconciler).
    JOBS_CREATED.labels(new.priority).inc()
    job = new_job_row(submitted, tenant, new)
    with logs.bound(job_id=job.id, tenant=tenant.id):
        log.info("job created: %s, %d steps at %dx%d", job.kind, job.steps, job.width, job.height)
        if not submitted.queued:
            ENQUEUE_FAILURES.labels("admit").inc()
    generation = generation_object(job, base_url=base)
    response.headers["Location"] = generation.urls.self_
    return generation


async def write(intake: JobIntake, tenant: Tenant, new: jobs_db.NewJob, state: AppState) -> Submitted:
    """The job written (or found refused) by the intake; 503 while Postgres cannot be reached."""
    try:
        return await intake.submit(tenant.id, new)
    except DatabaseUnavailable as error:
        log.warning("could not write a job: %s", error)
        raise Problem(
            503,
            "the database is unreachable; retry shortly",
            slug="database-unavailable",
            headers={"Retry-After": str(state.settings.retry_after_s)},
        ) from None


async def replay_of(session: Session, tenant: Tenant, new: jobs_db.NewJob) -> Job | None:
    """The tenant's earlier job under the request's Idempotency-Key, or None (no key, or none used);
    422 when that key was used with another body (db.jobs.IdempotencyConflict)."""
    if new.idempotency_key is None:
        return None
    return await run_in_threadpool(find_replay, session, tenant, new)


def replay_answer(job: Job, base: str, response: Response) -> Generation:
    """A repeated Idempotency-Key's answer: 200, the first job, marked as replayed."""
    IDEMPOTENT_REPLAYS.inc()
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"
    generation = generation_object(job, base_url=base)
    response.headers["Location"] = generation.urls.self_
    return generation


def literal_host(url: str) -> bool:
    """Whether the URL's host is an IP address (no resolver asked), or it is no valid URL at all."""
    try:
        host = urlsplit(url).hostname
        ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return True


def find_replay(session: Session, tenant: Tenant, new: jobs_db.NewJob) -> Job | None:
    """db.jobs.find_replay in a transaction of its own: no connection held while the request waits."""
    try:
        return jobs_db.find_replay(session=session, tenant_id=tenant.id, new=new)
    finally:
        session.commit()


def new_job_row(submitted: Submitted, tenant: Tenant, new: jobs_db.NewJob) -> Job:
    """The row the intake inserted, as the ORM would have loaded it (its defaults filled in)."""
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
        priority=str(new.priority),
        deadline_s=new.deadline_s,
        on_deadline=str(new.on_deadline),
        models_used=[],
        denoiser_evals={},
        admission_ms={},
        image_keys={},
        vae_decodes=0,
        attempts=0,
        cancel_requested=False,
        created_at=submitted.written.created_at,
    )
