"""Liveness, readiness and Prometheus metrics: for orchestrators and scrapers, without an API key.

/healthz and /readyz answer anyone, unlimited. /metrics on the API port asks for REPRISE_METRICS_TOKEN
when one is set (401 otherwise), and a scrape without it counts against the client's address
(api.rate_limit): each is a few queries of Postgres and Redis. On its own port (api.metrics_server) it
is neither guarded nor counted."""

from __future__ import annotations

import hmac
import logging
from contextlib import nullcontext

import redis
from fastapi import APIRouter, Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from api.auth import unauthorized
from api.deps import AddressDep, BearerDep, SessionDep, StateDep
from api.exposition import Exposition, StoreCollector
from api.problems import Problem
from api.rate_limit import AddressLimit
from api.routing import ReleasingRoute
from api.schemas import problem_responses
from core.settings import Settings
from core.settings.credentials import secret_text
from db.engine import ping

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"], route_class=ReleasingRoute)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is alive (checks nothing else)."""
    return {"status": "ok"}


@router.get("/readyz", responses=problem_responses(503))
def readyz(session: SessionDep, state: StateDep) -> dict[str, str]:
    """The database and the broker answer; 503 problem naming what does not."""
    down = []
    try:
        ping(session)
    except SQLAlchemyError:
        log.warning("readiness: database unreachable", exc_info=True)
        down.append("database")
    try:
        state.redis.ping()
    except redis.RedisError:
        log.warning("readiness: broker unreachable", exc_info=True)
        down.append("broker")
    if down:
        raise Problem(503, f"unreachable: {', '.join(down)}", slug="not-ready", title="Not ready")
    return {"status": "ready"}


def scrape_allowed(
    settings: Settings, credentials: HTTPAuthorizationCredentials | None, address: AddressLimit
) -> None:
    """The scraper's token when REPRISE_METRICS_TOKEN is set (401 otherwise); a scrape without one is
    counted against its address (429 past its rate)."""
    token = secret_text(settings.metrics_token)
    given = credentials.credentials if credentials is not None else ""
    if token and hmac.compare_digest(given.encode(), token.encode()):
        return
    address.charge()
    if token:
        detail = "/metrics asks for REPRISE_METRICS_TOKEN as 'Authorization: Bearer <token>'"
        raise unauthorized(detail, error="invalid_token" if given else None)


@router.get("/metrics", include_in_schema=False)
def metrics(session: SessionDep, state: StateDep, credentials: BearerDep, address: AddressDep) -> Response:
    """Prometheus metrics in the text exposition format; 404 when they have a port of their own."""
    if state.settings.metrics_port is not None:
        raise Problem(404, "metrics are served on their own port (REPRISE_METRICS_PORT)", slug="not-found")
    scrape_allowed(state.settings, credentials, address)
    stores = StoreCollector(state.settings, state.redis, sessions=lambda: nullcontext(session))
    return Response(generate_latest(Exposition(stores)), media_type=CONTENT_TYPE_LATEST)
