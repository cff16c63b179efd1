"""GET /v1/generations/{id}/video: a video job's animated WebP (issue 18).

The video worker writes the WebP at completion (jobs.video_key), so a read is one blob read: no decode
node, no 202. Like an image it can be handed over as a 307 to a presigned URL (delivery=redirect, on
S3), and never changes once it exists (a strong ETag, immutable caching).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from starlette.concurrency import run_in_threadpool

from api.deps import BearerDep, StateDep
from api.problems import Problem
from api.routes.generations import authorized_job
from api.routes.images import IMMUTABLE, etag_matches, not_ready, wrong_kind
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.errors import BlobNotFound
from core.vocabulary import ImageDelivery, JobKind, JobStatus
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
    if job.kind != JobKind.VIDEO:
        raise wrong_kind(job, "image")
    if job.status != JobStatus.SUCCEEDED:
        raise not_ready(job, "video")
    etag = f'"{job.id}.webp"'  # strong: the stored bytes themselves, written once
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag, "Cache-Control": IMMUTABLE})
    key = job.video_key
    if key is None or job.outputs_purged_at is not None:
        raise _gone(job)
    if (delivery or state.settings.image_delivery) == ImageDelivery.REDIRECT:
        url = state.blob_store.presigned_url(key, expires_s=state.settings.presign_ttl_s)
        if url is not None:
            return Response(status_code=307, headers={"Location": url, "Cache-Control": "no-store"})
    try:
        data = await run_in_threadpool(state.blob_store.get, key)
    except BlobNotFound:
        raise _gone(job) from None
    return Response(content=data, media_type=WEBP, headers={"ETag": etag, "Cache-Control": IMMUTABLE})
