"""GET /v1/generations/{id}/events: the job as server-sent events, until it ends.

    retry: 2000
    event: generation     the job (GET's JSON) now, then at each change of status, progress or queue place
    id: <n>
    data: {...}

    event: done           the job once it has ended (succeeded, failed, canceled); the stream closes

    : keep-alive          a comment every KEEPALIVE_S, so that proxies keep an idle stream open

A stream holds no thread and no database connection while it waits: it wakes on the job's announcements
(jobs.job_events, through the process's Listeners) and reads the row then, or every RECHECK_S in case an
announcement was lost. After MAX_STREAM_S it closes; a client reconnects and gets the job as it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Final

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, BaseUrlDep, BearerDep, StateDep
from api.routes.generations import authorized_job, queue_of
from api.schemas import problem_responses
from core.vocabulary import TERMINAL_STATUSES
from db.engine import engine_for
from db.models import Job
from jobs.representation import Generation, generation_object

RECHECK_S: Final = 5.0
KEEPALIVE_S: Final = 15.0
MAX_STREAM_S: Final = 900.0
RETRY_MS: Final = 2000

router = APIRouter(prefix="/v1/generations", tags=["generations"])


def _event(name: str, number: int, generation: Generation) -> bytes:
    data = json.dumps(generation.model_dump(mode="json", by_alias=True), separators=(",", ":"))
    return f"event: {name}\nid: {number}\ndata: {data}\n\n".encode()


def _visible(generation: Generation) -> tuple[object, ...]:
    """What a change is: status, progress step, queue place (not the estimates' drift)."""
    progress = generation.progress.step if generation.progress else None
    place = generation.queue.position if generation.queue else None
    return (generation.status, progress, place)


def _reload(state: AppState, job: Job, base: str) -> Generation:
    with Session(engine_for(state.settings.sqlalchemy_url), expire_on_commit=False) as session:
        current = session.get(Job, job.id)
        if current is None:  # deleted meanwhile: the last view stands, marked ended by the caller
            return generation_object(job, base_url=base)
        return generation_object(current, base_url=base, queue=queue_of(state, current, session))


async def job_events(state: AppState, job: Job, base: str) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MAX_STREAM_S
    yield f"retry: {RETRY_MS}\n\n".encode()
    sent: tuple[object, ...] | None = None
    number = 0
    quiet_since = loop.time()
    while loop.time() < deadline:
        watch = state.waiter.watch(str(job.id))
        try:
            generation = await run_in_threadpool(_reload, state, job, base)
            if generation.status in TERMINAL_STATUSES:
                yield _event("done", number + 1, generation)
                return
            if _visible(generation) != sent:
                number += 1
                sent = _visible(generation)
                quiet_since = loop.time()
                yield _event("generation", number, generation)
            elif loop.time() - quiet_since >= KEEPALIVE_S:
                quiet_since = loop.time()
                yield b": keep-alive\n\n"
            await watch.wait(min(RECHECK_S, KEEPALIVE_S, max(deadline - loop.time(), 0.0)))
        finally:
            watch.close()


@router.get(
    "/{job_id}/events",
    responses={
        200: {
            "description": "Server-sent events: `generation` at each change, `done` at the end.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 404),
    },
    response_class=StreamingResponse,
)
async def stream_generation_events(
    job_id: str, credentials: BearerDep, state: StateDep, base: BaseUrlDep
) -> StreamingResponse:
    """Follow a job as server-sent events (status, progress, queue place) until it ends."""
    job = await run_in_threadpool(authorized_job, state, credentials, job_id)
    return StreamingResponse(
        job_events(state, job, base),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
