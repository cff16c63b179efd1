"""GET /v1/generations/{id}/events: the job as server-sent events, until it ends.

    retry: 2000
    event: generation     the job (GET's JSON) now, then at each change of status, progress or queue place
    id: <n>
    data: {...}

    event: done           the job once it has ended (succeeded, failed, canceled); the stream closes

    event: revoked        the stream's API key was revoked meanwhile (api.revocations); the stream closes

    : keep-alive          a comment every KEEPALIVE_S, so that proxies keep an idle stream open

A stream holds no thread and no database connection while it waits: the job's feed (api.feeds, one per
followed job and process) wakes on the job's announcements (jobs.job_events), reads the row once for all
its streams, and hands each the new view. After MAX_STREAM_S a stream closes; a client reconnects and gets
the job as it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Final

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, BaseUrlDep, BearerDep, StateDep
from api.feeds import JobFeed
from api.routes.generations import authorized_job, queue_of
from api.schemas import problem_responses
from core.vocabulary import TERMINAL_STATUSES
from db.engine import engine_for
from db.models import Job
from db.tenants import hash_key
from jobs.representation import Generation, generation_object

KEEPALIVE_S: Final = 15.0
MAX_STREAM_S: Final = 900.0
RETRY_MS: Final = 2000
REVOKED: Final = json.dumps({"detail": "the API key of this stream was revoked"})

router = APIRouter(prefix="/v1/generations", tags=["generations"])


def _event(name: str, number: int, data: str) -> bytes:
    return f"event: {name}\nid: {number}\ndata: {data}\n\n".encode()


def _reload(state: AppState, job: Job, base: str) -> Generation:
    with Session(engine_for(state.settings.sqlalchemy_url), expire_on_commit=False) as session:
        current = session.get(Job, job.id)
        if current is None:  # deleted meanwhile: the last view stands, marked ended by the caller
            return generation_object(job, base_url=base)
        return generation_object(current, base_url=base, queue=queue_of(state, current, session))


async def _next_view(feed: JobFeed, seen: int, wait_s: float, revoked: asyncio.Future[None]) -> int:
    """The feed's next version (JobFeed.next_after), or `seen` as soon as the key is revoked."""
    following = asyncio.ensure_future(feed.next_after(seen, wait_s))
    either: set[asyncio.Future[Any]] = {following, revoked}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if following.done():
        return following.result()
    following.cancel()
    return seen


async def job_events(
    state: AppState, job: Job, base: str, revoked: asyncio.Future[None]
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MAX_STREAM_S
    yield f"retry: {RETRY_MS}\n\n".encode()
    feeds = state.feeds
    async with feeds.follow(str(job.id), (job.id, base), lambda: _reload(state, job, base)) as feed:
        seen = number = 0
        while (left := deadline - loop.time()) > 0:
            version = await _next_view(feed, seen, min(KEEPALIVE_S, left), revoked)
            if revoked.done():
                yield _event("revoked", number + 1, REVOKED)
                return
            if version == seen or feed.latest is None:
                yield b": keep-alive\n\n"
                continue
            seen, generation = version, feed.latest  # and feed.latest_json, its JSON
            number += 1
            if generation.status in TERMINAL_STATUSES:
                yield _event("done", number, feed.latest_json)
                return
            yield _event("generation", number, feed.latest_json)


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
    assert credentials is not None  # authorized_job answered 401 otherwise
    key_hash = hash_key(credentials.credentials)
    listener = state.revocations
    revoked = listener.register(key_hash)
    return StreamingResponse(
        job_events(state, job, base, revoked),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(listener.unregister, key_hash, revoked),
    )
