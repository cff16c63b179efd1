"""POST /v1/images/generations: OpenAI's images API over Reprise's jobs, so that OpenAI's SDKs work
unchanged (`OpenAI(base_url=".../v1", api_key=<a Reprise key>).images.generate(...)`).

A request becomes `n` ordinary jobs through the usual submission (same limits, cache, metrics and
job resources: each one is listed under /v1/generations), and is answered once they have all ended,
within the `Prefer: wait` bound (api.waiting; MAX_WAIT_S when the request states none). Errors on
this path are in OpenAI's shape (api.openai_errors).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import AppState, BaseUrlDep, SessionDep, StateDep, TenantDep
from api.openai_compat import (
    ImageData,
    ImageGenerationRequest,
    ImagesResponse,
    check_model,
    openai_error_responses,
    parse_size,
)
from api.problems import Problem
from api.routes.generations import PreferHeader
from api.routes.images import serve_image
from api.routing import ReleasingRoute
from api.schemas import GenerationCreate
from api.submission import submit_request
from api.waiting import MAX_WAIT_S, preferred_wait
from core.server_keys import output_link_key
from core.settings import Settings
from core.vocabulary import TERMINAL_STATUSES, ImageDelivery, JobStatus
from db import jobs as jobs_db
from db.engine import session_scope
from db.models import Job, Tenant
from jobs.output_links import signed_output

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/images", tags=["openai"], route_class=ReleasingRoute)


def served_models(settings: Settings) -> list[str]:
    """The names `model` may take: the large model's, as configured (`lab:large` on the lab)."""
    return [settings.model_source("large")]


def served_sizes(settings: Settings) -> list[str]:
    """The sizes `size` may take: the models' native square size (64x64 on the lab)."""
    side = settings.effective_default_size
    return [f"{side}x{side}"]


@router.post("/generations", responses=openai_error_responses(400, 401, 413, 429, 500, 503, 504))
async def create_image(
    body: ImageGenerationRequest,
    tenant: TenantDep,
    session: SessionDep,
    state: StateDep,
    base: BaseUrlDep,
    request: Request,
    response: Response,
    prefer: PreferHeader = None,
) -> ImagesResponse:
    """OpenAI's create-image: `n` jobs, answered with their images once they have ended."""
    # 1. Check what OpenAI's request asks against what this deployment serves.
    check_model(body.model, served_models(state.settings))
    width, height = parse_size(body.size, served_sizes(state.settings))
    create = GenerationCreate.model_validate({"prompt": body.prompt, "width": width, "height": height})
    deadline = time.monotonic() + (preferred_wait(prefer) or MAX_WAIT_S)
    # 2. n ordinary jobs, each with its own random seed.
    scratch = Response()  # the native create's headers (Location) mean nothing to an OpenAI client
    ids = [
        (await submit_request(create, tenant, session, state, base, scratch, None, request)).id
        for _ in range(body.n)
    ]
    log.info(
        "openai images request: %d jobs", body.n, extra={"user": body.user, "jobs": [str(i) for i in ids]}
    )
    # 3. Held until each has ended, then answered with its link or its bytes.
    jobs = [await _ended(state, tenant.id, job_id, deadline) for job_id in ids]
    answer_as = body.response_format
    data = [await _image_data(request, state, tenant, base, job, answer_as, deadline) for job in jobs]
    return ImagesResponse(created=int(time.time()), data=data)


async def _ended(state: AppState, tenant_id: uuid.UUID, job_id: uuid.UUID, deadline: float) -> Job:
    """The job once it has ended; a 504 naming it when the bound passes first, a 500 when it failed."""
    latest: list[Job] = []

    def reload() -> Job:
        with session_scope(state.settings) as own:
            found = jobs_db.get_job(session=own, tenant_id=tenant_id, job_id=job_id)
        assert found is not None  # the tenant's own job, created by this request
        return found

    async def ended() -> bool:
        latest[:] = [await run_in_threadpool(reload)]
        return latest[0].status in TERMINAL_STATUSES

    await state.waiter.hold(str(job_id), max(0.0, deadline - time.monotonic()), ended)
    job = latest[-1] if latest else await run_in_threadpool(reload)
    if job.status == JobStatus.SUCCEEDED:
        return job
    if job.status in TERMINAL_STATUSES:
        reason = f": {job.error}" if job.error else ""
        raise Problem(500, f"generation {job.id} {job.status}{reason}", slug="generation-failed")
    raise Problem(
        504,
        f"generation {job.id} had not ended within the wait; it goes on: GET /v1/generations/{job.id} "
        "(send `Prefer: wait=N`, N up to 60, to wait longer)",
        slug="wait-exceeded",
    )


async def _image_data(
    request: Request, state: AppState, tenant: Tenant, base: str, job: Job, answer_as: str, deadline: float
) -> ImageData:
    """A succeeded job as OpenAI's image item: a signed link (no key needed, as OpenAI's URLs), or the
    PNG in base64, read through the read path like GET .../image."""
    if answer_as == "url":
        link = signed_output(
            job_id=job.id,
            key=output_link_key(state.settings),
            base_url=base,
            ttl_s=state.settings.output_link_ttl_s,
            now=datetime.now(UTC),
        )
        return ImageData(url=link["url"])
    while True:
        answer = await serve_image(request, state, job, "png", ImageDelivery.BYTES, None)
        if answer.status_code == 200:
            return ImageData(b64_json=base64.b64encode(bytes(answer.body)).decode())
        if time.monotonic() >= deadline:  # still decoding (202) past the bound
            raise Problem(504, f"the image of generation {job.id} is still decoding; retry", slug="decoding")
        await asyncio.sleep(0.2)
