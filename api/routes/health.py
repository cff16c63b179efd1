"""Liveness, readiness and Prometheus metrics: for orchestrators and scrapers, no authentication."""

from __future__ import annotations

import logging
from contextlib import nullcontext

import redis
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from api.deps import SessionDep, StateDep
from api.exposition import Exposition, StoreCollector
from api.problems import Problem
from api.routing import ReleasingRoute
from api.schemas import problem_responses
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


@router.get("/metrics", include_in_schema=False)
def metrics(session: SessionDep, state: StateDep) -> Response:
    """Prometheus metrics in the text exposition format; 404 when they have a port of their own."""
    if state.settings.metrics_port is not None:
        raise Problem(404, "metrics are served on their own port (REPRISE_METRICS_PORT)", slug="not-found")
    stores = StoreCollector(state.settings, state.redis, sessions=lambda: nullcontext(session))
    return Response(generate_latest(Exposition(stores)), media_type=CONTENT_TYPE_LATEST)
