"""GET /v1/outputs/{id}: a succeeded job's image or video through a signed, time-limited link, without
the API key: the `signed_output` a webhook delivers (jobs.output_links). A link that is not ours, or
that would live longer than REPRISE_OUTPUT_LINK_MAX_TTL_S, is a 403, an expired one a 410; a valid one
is answered as GET .../image or .../video would be.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, StateDep
from api.problems import Problem
from api.routes.images import ImageFormatParam, serve_image
from api.routes.videos import serve_video
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.server_keys import output_link_key
from core.vocabulary import JobKind
from db import webhooks as webhooks_db
from db.engine import engine_for
from db.models import Job
from jobs.output_links import LINK_PREFIX, LinkCheck, check_link

router = APIRouter(prefix=LINK_PREFIX, tags=["generations"], route_class=ReleasingRoute)


def _invalid() -> Problem:
    return Problem(
        403,
        "this link is not signed for this output; a webhook's signed_output carries one, or read "
        "GET /v1/generations/{id}/image with the API key",
        slug="invalid-link",
    )


def linked_job(state: AppState, job_id: str, expires: int, signature: str) -> Job:
    """The job a link signs for, once its signature and expiry check out (403, 410 otherwise)."""
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        raise _invalid() from None
    settings = state.settings
    checked = check_link(
        key=output_link_key(settings),
        job_id=parsed,
        expires=expires,
        signature=signature,
        now=datetime.now(UTC),
        max_ttl_s=settings.output_link_max_ttl_s,
    )
    if checked is LinkCheck.INVALID:
        raise _invalid()
    if checked is LinkCheck.BEYOND_CAP:
        raise Problem(
            403,
            f"this link would live longer than this server allows any link to "
            f"({settings.output_link_max_ttl_s:g} s, REPRISE_OUTPUT_LINK_MAX_TTL_S); ask for a new one",
            slug="invalid-link",
        )
    if checked is LinkCheck.EXPIRED:
        ended = datetime.fromtimestamp(expires, UTC).isoformat()
        raise Problem(410, f"this link expired at {ended}; ask for a new one", slug="link-expired")
    with Session(engine_for(settings.sqlalchemy_url), expire_on_commit=False) as session:
        job = webhooks_db.job_of(session, parsed)
    if job is None:
        raise _invalid()
    if job.deleted_at is not None:
        raise Problem(404, f"no generation {job_id}", slug="not-found")
    return job


@router.get(
    "/{job_id}",
    response_class=Response,
    responses={
        200: {"description": "The image (image/png, webp, jpeg) or the video (image/webp)."},
        202: {"description": "Still decoding: retry after Retry-After seconds."},
        304: {"description": "If-None-Match matched."},
        307: {"description": "A presigned URL of the stored output (S3, delivery redirect)."},
        **problem_responses(403, 404, 409, 410),
    },
)
async def get_signed_output(
    request: Request,
    job_id: str,
    state: StateDep,
    expires: Annotated[int, Query(description="Unix seconds after which the link answers 410.")],
    signature: Annotated[str, Query(max_length=100, description="The link's HMAC-SHA256, base64url.")],
    format: Annotated[ImageFormatParam, Query(description="Image format (an image job's).")] = "png",
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
) -> Response:
    """Download a job's output through a webhook's signed link, without the API key."""
    job = await run_in_threadpool(linked_job, state, job_id, expires, signature)
    if job.kind == JobKind.VIDEO:
        return await serve_video(request, state, job, None, if_none_match)
    return await serve_image(request, state, job, format, None, if_none_match)
