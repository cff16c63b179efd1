"""GET /v1/generations/{id}/video: a video job's animated WebP (FlexCache).

A video job stores its final latent; the first read decodes it into the animated WebP on the decode pool,
through the images' read path (LatentBox 4: the owner node's tiers keep it, identical reads share one
decode, 202 with Retry-After past REPRISE_DECODE_WAIT_S). With "decode": "eager" the worker stored the
WebP at completion. Either way a stored WebP is one of the job's image_keys, under
db.images.video_format(fps), and can be handed over as a 307 to a presigned URL (delivery=redirect, on
S3). It never changes once it exists (immutable caching).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, BearerDep, StateDep
from api.problems import Problem
from api.reads import ReadTarget
from api.routes.generations import authorized_job
from api.routes.images import IMMUTABLE, Served, etag_matches, not_ready, read_through, wrong_kind
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.vocabulary import ImageDelivery, JobKind, JobStatus
from db.images import video_format
from db.models import Job

router = APIRouter(prefix="/v1/generations", tags=["generations"], route_class=ReleasingRoute)

WEBP = "image/webp"


def _gone(job: Job) -> Problem:
    return Problem(410, f"the video of generation {job.id} is no longer stored", slug="video-gone")


@router.get(
    "/{job_id}/video",
    response_class=Response,
    responses={
        200: {"content": {WEBP: {}}, "description": "The video: an animated WebP at the input's fps."},
        304: {"description": "If-None-Match matched: the video you hold is current."},
        307: {"description": "delivery=redirect: a presigned URL of the stored video (S3)."},
        **problem_responses(401, 404, 409, 410),
    },
)
async def get_generation_video(
    request: Request,
    job_id: str,
    credentials: BearerDep,
    state: StateDep,
    delivery: Annotated[
        ImageDelivery | None,
        Query(description="bytes, or redirect (a presigned URL, on S3). Default: REPRISE_IMAGE_DELIVERY."),
    ] = None,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
) -> Response:
    """Download a succeeded video job's animated WebP. 404 (wrong-kind) for an image job: its image is
    at GET .../image; 409 (not-ready) until the job has succeeded."""
    job = await run_in_threadpool(authorized_job, state, credentials, job_id)
    return await serve_video(request, state, job, delivery, if_none_match)


async def serve_video(
    request: Request, state: AppState, job: Job, delivery: ImageDelivery | None, if_none_match: str | None
) -> Response:
    """A video job's WebP once the caller may read it (its key, or a signed link)."""
    if job.kind != JobKind.VIDEO:
        raise wrong_kind(job, "image")
    if job.status != JobStatus.SUCCEEDED:
        raise not_ready(job, "video")
    etag = f'W/"{job.id}.webp"'  # weak: a decode on other hardware can move pixels (LatentBox 6.6)
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag, "Cache-Control": IMMUTABLE})
    fmt = video_format(job.fps or 1)
    stored = (job.image_keys or {}).get(fmt)  # stored at completion (eager), or kept by a decode node
    if job.outputs_purged_at is not None or (stored is None and job.final_latent_key is None):
        raise _gone(job)
    if stored is not None and (delivery or state.settings.image_delivery) == ImageDelivery.REDIRECT:
        url = state.blob_store.presigned_url(stored, expires_s=state.settings.presign_ttl_s)
        if url is not None:
            return Response(status_code=307, headers={"Location": url, "Cache-Control": "no-store"})
    target = ReadTarget(job.id, fmt, job.final_latent_key, stored)
    return await read_through(request, state, target, Served(etag, WEBP, _gone(job)))
