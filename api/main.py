"""Builds the FastAPI app. `uvicorn api.main:app` (or `--factory api.main:create_serving_app`) serves it."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from api.deps import AppState, hear_revocations, limit_address, limit_rate
from api.middleware import BodyLimitMiddleware, MetricsMiddleware
from api.problems import install_problem_handlers
from api.reads import ImageReader, NodeReader
from api.routes import events, generations, health, images, openai_images, outputs, stats, videos
from api.routes.webhook_deliveries import router as deliveries
from api.schemas import problem_media_types, problem_responses
from core.settings import Settings, get_settings
from db.blobs.base import BlobStore
from jobs.dispatch import Dispatcher
from jobs.webhooks import Resolver, system_resolver

DESCRIPTION = """Text-to-image generation as asynchronous jobs, with an approximate cache of earlier work.

Submit with `POST /v1/generations` (`"kind": "video"` for an animated WebP), then poll the job, or
receive a signed webhook (Standard Webhooks).
Authenticate with `Authorization: Bearer <API key>`. Every error is `application/problem+json` (RFC 9457),
except on `POST /v1/images/generations`, OpenAI's images API for OpenAI's SDKs, whose errors are OpenAI's.
"""


def create_app(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    blob_store: BlobStore | None = None,
    reader: ImageReader | None = None,
    resolver: Resolver = system_resolver,
) -> FastAPI:
    """The API app. Parts left out are built from settings on first use (Celery app, blob store);
    `reader` has no default: without one, images that exist only as latents answer 503."""
    settings = settings or get_settings()
    # Operation ids are the route functions' names (create_generation, get_generation_image...): stable
    # across paths and releases, so generated clients keep their method names.
    app = FastAPI(
        title="Reprise", version="0.1.0", description=DESCRIPTION, generate_unique_id_function=_operation_id
    )
    app.state.reprise = AppState(
        settings=settings, dispatcher_=dispatcher, blob_store_=blob_store, reader=reader, resolver=resolver
    )
    keyed = (
        generations.router,
        events.router,
        images.router,
        videos.router,
        stats.router,
        openai_images.router,
    )
    # Every route that takes an API key hears revoked keys, then counts against its tenant's request rate.
    per_key = [Depends(hear_revocations), Depends(limit_rate)]
    for router in (*keyed, deliveries):  # deliveries: a tenant's webhook deliveries, keyed too
        app.include_router(router, dependencies=per_key, responses=problem_responses(429))
    # A signed link's download carries no key: it counts against the client's address. Health and metrics
    # take none either; /metrics counts its own (a scrape with its token is not counted), /healthz and
    # /readyz are the orchestrators'.
    app.include_router(
        outputs.router, dependencies=[Depends(limit_address)], responses=problem_responses(429)
    )
    app.include_router(health.router)
    routers = (*keyed, deliveries, outputs.router, health.router)
    install_problem_handlers(app, [r for router in routers for r in router.routes if isinstance(r, APIRoute)])
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware)  # outermost: 413s are counted too
    _document_problems(app)
    return app


def _operation_id(route: APIRoute) -> str:
    return route.name


def _document_problems(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = problem_media_types(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_serving_app() -> FastAPI:
    """The app `reprise api` serves: settings from the environment, images read through the decode nodes."""
    app = create_app()
    state = app.state.reprise
    state.reader = NodeReader(state.settings, state.dispatcher)
    return app


def __getattr__(name: str) -> FastAPI:
    """`api.main:app` for uvicorn's import string, built on first use, so importing this module reads
    no settings and connects to nothing."""
    if name == "app":
        global _app
        if _app is None:
            _app = create_serving_app()
        return _app
    raise AttributeError(name)


_app: FastAPI | None = None
