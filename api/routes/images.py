"""GET /v1/generations/{id}/image: a job's image, through LatentBox's read path (api.reads).

An image the durable store holds (an eager job's PNG, an image store's) can be answered with a 307 to
a presigned URL; everything else is read through the image's owner decode node, which answers from
its tiers or decodes the stored latent. The handler is async: a read waiting on a decode holds no
thread, and after REPRISE_DECODE_WAIT_S it answers 202 with Retry-After (the decode goes on; the
retry joins it or finds the image cached).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, BearerDep, StateDep
from api.problems import Problem
from api.reads import ReadOutcome, ReadTarget
from api.routes.generations import authorized_job
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.errors import BlobNotFound, NoDecodeNode
from core.vocabulary import ImageDelivery, JobKind, JobStatus
from db import stats
from db.engine import session_scope
from db.images import ImageFormat
from db.models import Job

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/generations", tags=["generations"], route_class=ReleasingRoute)

ImageFormatParam = Literal["png", "webp", "jpeg"]
IMMUTABLE = "private, max-age=31536000, immutable"  # a job's image never changes once it exists


def _etag(job: Job, fmt: str) -> str:
    # Weak: decoding the same latent on other hardware can move pixels by a level (LatentBox 6.6).
    return f'W/"{job.id}.{fmt}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    if if_none_match is None:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag.removeprefix("W/") in tags


@router.get(
    "/{job_id}/image",
    response_class=Response,
    responses={
        200: {"content": {fmt.media_type: {} for fmt in ImageFormat}, "description": "The image."},
        202: {"description": "Still decoding: retry after Retry-After seconds (Location: this URL)."},
        304: {"description": "If-None-Match matched: the image you hold is current."},
        307: {"description": "delivery=redirect: a presigned URL of the stored image (S3)."},
        **problem_responses(401, 404, 409, 410, 503),
    },
)
async def get_generation_image(
    request: Request,
    job_id: str,
    credentials: BearerDep,
    state: StateDep,
    format: Annotated[ImageFormatParam, Query(description="Image format.")] = "png",
    delivery: Annotated[
        ImageDelivery | None,
        Query(
            description="bytes, or redirect (a presigned URL, for images the store holds). Default: "
            "REPRISE_IMAGE_DELIVERY."
        ),
    ] = None,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
) -> Response:
    """Download a succeeded job's image, decoded from its stored latent when no cache holds it."""
    # No session dependency: a read may wait seconds on a decode, and a burst of waiting reads must
    # hold no database connection (each short step below opens and closes its own).
    job = await run_in_threadpool(authorized_job, state, credentials, job_id)
    return await serve_image(request, state, job, format, delivery, if_none_match)


async def serve_image(
    request: Request,
    state: AppState,
    job: Job,
    format: ImageFormatParam,
    delivery: ImageDelivery | None,
    if_none_match: str | None,
) -> Response:
    """A job's image once the caller may read it (its key, or a signed link): the bytes, 304, 307 or 202."""
    if job.kind == JobKind.VIDEO:
        raise wrong_kind(job, "video")
    if job.status != JobStatus.SUCCEEDED:
        raise not_ready(job, "image")
    etag = _etag(job, format)
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag, "Cache-Control": IMMUTABLE})
    stored = (job.image_keys or {}).get(format)
    if stored is not None and (delivery or state.settings.image_delivery) == ImageDelivery.REDIRECT:
        url = state.blob_store.presigned_url(stored, expires_s=state.settings.presign_ttl_s)
        if url is not None:
            await run_in_threadpool(_count_read, state)
            return Response(status_code=307, headers={"Location": url, "Cache-Control": "no-store"})
    if job.final_latent_key is None and stored is None:
        raise _gone(job)
    target = ReadTarget(job.id, format, job.final_latent_key, stored)
    served = Served(etag, ImageFormat(format).media_type, _gone(job))
    return await read_through(request, state, target, served)


@dataclass(frozen=True, slots=True)
class Served:
    """How a read's bytes are answered: their ETag and media type, and the problem once they are gone."""

    etag: str
    media_type: str
    gone: Problem


async def read_through(request: Request, state: AppState, target: ReadTarget, served: Served) -> Response:
    """The read path's answer for a target (LatentBox 4): the owner node's tiers or its decode; the stored
    bytes when no node is alive; 202 with Retry-After and Location while the decode runs past the wait."""
    outcome = await _read(state, target)
    if outcome is None:
        if target.image_key is not None:  # no decode node to ask: the stored bytes themselves
            return await _stored(state, target.image_key, served)
        raise Problem(
            503,
            "no decode node is alive; retry shortly",
            slug="decode-unavailable",
            headers={"Retry-After": str(state.settings.retry_after_s)},
        )
    if isinstance(outcome, Response):
        outcome.headers["Location"] = str(request.url)
        return outcome
    return await _answered(state, outcome, served)


async def _answered(state: AppState, outcome: ReadOutcome, served: Served) -> Response:
    """A node's answer as the response: the bytes with their headers, or the problem it reported."""
    reply = outcome.reply
    if reply.status == "gone":
        raise served.gone
    if reply.status != "ok":
        raise Problem(
            503,
            f"the decode failed: {reply.message}; retry shortly",
            slug="decode-failed",
            headers={"Retry-After": str(state.settings.retry_after_s)},
        )
    await run_in_threadpool(_count_read, state)
    headers = {
        "ETag": served.etag,
        "Cache-Control": IMMUTABLE,
        "X-Reprise-Read": reply.tier,
        "X-Reprise-Node": reply.node,
    }
    if outcome.coalesced:
        headers["X-Reprise-Coalesced"] = "true"
    if reply.spilled:
        headers["X-Reprise-Spilled"] = "true"
    return Response(content=reply.data, media_type=served.media_type, headers=headers)


async def _read(state: AppState, target: ReadTarget) -> ReadOutcome | Response | None:
    """The node's answer; a 202 Response when it took longer than the wait; None: no node to ask."""
    if state.reader is None:
        return None
    try:
        outcome = await state.reader.read(target, wait_s=state.settings.decode_wait_s)
    except NoDecodeNode:
        return None
    if outcome is None:
        retry = str(state.settings.retry_after_s)
        return Response(
            content=b'{"status": "decoding"}',
            status_code=202,
            media_type="application/json",
            headers={"Retry-After": retry},
        )
    return outcome


async def _stored(state: AppState, key: str, served: Served) -> Response:
    try:
        data = await run_in_threadpool(state.blob_store.get, key)
    except BlobNotFound:
        raise served.gone from None
    await run_in_threadpool(_count_read, state)
    headers = {"ETag": served.etag, "Cache-Control": IMMUTABLE, "X-Reprise-Read": "stored"}
    return Response(content=data, media_type=served.media_type, headers=headers)


def not_ready(job: Job, output: str) -> Problem:
    return Problem(
        409,
        f"generation {job.id} is {job.status}; its {output} exists once it has succeeded",
        slug="not-ready",
    )


def wrong_kind(job: Job, route: Literal["image", "video"]) -> Problem:
    """404 for the image of a video job or the video of an image job, naming the route that serves it."""
    return Problem(
        404,
        f"generation {job.id} is not {'an image' if job.kind == JobKind.VIDEO else 'a video'} job; "
        f"GET /v1/generations/{job.id}/{route}",
        slug="wrong-kind",
    )


def _count_read(state: AppState) -> None:
    """One read answered (interval_stats.image_reads: /v1/stats' decodes per read)."""
    with session_scope(state.settings) as session:
        stats.record_decodes(session, image_reads=1)


def _gone(job: Job) -> Problem:
    return Problem(
        410, f"the image of generation {job.id} and its latent are no longer stored", slug="image-gone"
    )
