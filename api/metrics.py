"""Prometheus metrics of the API process, served at /metrics (or on REPRISE_METRICS_PORT).

With several API processes (`reprise api --workers N`) prometheus_client's multiprocess mode adds up
every process's counters (PROMETHEUS_MULTIPROC_DIR, set by `reprise api`); gauges show the latest value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db.cascade import cascade_counts
from db.cascade import latest_decision as latest_cascade_decision
from db.pools import latest_decision, workers_per_role

LATEST: Final = "mostrecent"  # a gauge set at scrape time: the newest write of any API process wins
UNMATCHED_ROUTE = "<unmatched>"  # unknown paths share one label, so scanners cannot blow up cardinality

HTTP_REQUESTS = Counter(
    "reprise_http_requests_total",
    "HTTP requests by route template, method and status.",
    ["route", "method", "status"],
)
HTTP_LATENCY = Histogram(
    "reprise_http_request_duration_seconds",
    "HTTP request latency by route template and method.",
    ["route", "method"],
)
JOBS_CREATED = Counter("reprise_jobs_created_total", "Jobs accepted through the API.")
IDEMPOTENT_REPLAYS = Counter("reprise_idempotent_replays_total", "Requests answered with an earlier job.")
JOBS_REJECTED = Counter(
    "reprise_jobs_rejected_total", "Submissions refused for capacity.", ["reason"]
)  # reason: inflight_limit, backpressure
ENQUEUE_FAILURES = Counter(
    "reprise_enqueue_failures_total",
    "Tasks the API could not put on the broker (the reconciler retries).",
    ["task"],
)

# The pools and the pool monitor (MoDM 5.3), read from Postgres at each scrape (`refresh_pool_gauges`).
POOL_WORKERS = Gauge(
    "reprise_pool_workers", "Workers per role (worker_roles).", ["role"], multiprocess_mode=LATEST
)
POOL_TARGET = Gauge(
    "reprise_pool_target_workers",
    "Workers per pool the monitor's latest decision aims at.",
    ["role"],
    multiprocess_mode=LATEST,
)
POOL_MONITOR_HEURISTIC = Gauge(
    "reprise_pool_monitor_heuristic_large",
    "Algorithm 1's number of large workers before the PID.",
    multiprocess_mode=LATEST,
)
POOL_MONITOR_CONTROLLED = Gauge(
    "reprise_pool_monitor_controlled_large",
    "The PID's continuous number of large workers.",
    multiprocess_mode=LATEST,
)
POOL_MONITOR_DECIDED = Gauge(
    "reprise_pool_monitor_last_decision_timestamp_seconds",
    "When the monitor last decided (Unix time).",
    multiprocess_mode=LATEST,
)


# DiffServe's allocator (3.3), from its latest decision in cascade_decisions (`refresh_cascade_gauges`).
CASCADE_THRESHOLD = Gauge(
    "reprise_cascade_threshold",
    "The discriminator confidence a light image needs, as the allocator last set it.",
    multiprocess_mode=LATEST,
)
CASCADE_TARGET = Gauge(
    "reprise_cascade_target_workers",
    "Workers per cascade model (light, heavy) the MILP's latest solution aims at.",
    ["model"],
    multiprocess_mode=LATEST,
)
CASCADE_SOLVE_MS = Gauge(
    "reprise_cascade_milp_solve_milliseconds",
    "How long the latest MILP took to solve.",
    multiprocess_mode=LATEST,
)
CASCADE_FEASIBLE = Gauge(
    "reprise_cascade_feasible",
    "1 when the latest MILP met demand and SLO; 0 when it took the stated fallback.",
    multiprocess_mode=LATEST,
)
CASCADE_ESCALATION = Gauge(
    "reprise_cascade_escalation_ratio",
    "Light stages of the last hour the discriminator escalated to the heavy model.",
    multiprocess_mode=LATEST,
)
CASCADE_DECIDED = Gauge(
    "reprise_cascade_last_decision_timestamp_seconds",
    "When the cascade's allocator last decided (Unix time).",
    multiprocess_mode=LATEST,
)


def refresh_cascade_gauges(session: Session) -> None:
    """Set the cascade gauges from the allocator's latest decision and the last hour's light stages."""
    counts = cascade_counts(session, datetime.now(UTC) - timedelta(hours=1))
    CASCADE_ESCALATION.set(counts.escalated / counts.light if counts.light else float("nan"))
    decision = latest_cascade_decision(session)
    if decision is None:
        return
    CASCADE_THRESHOLD.set(decision.threshold)
    CASCADE_TARGET.labels(model="light").set(decision.target_light)
    CASCADE_TARGET.labels(model="heavy").set(decision.target_heavy)
    CASCADE_SOLVE_MS.set(decision.solve_ms)
    CASCADE_FEASIBLE.set(1.0 if decision.feasible else 0.0)
    CASCADE_DECIDED.set(decision.decided_at.timestamp())


def refresh_pool_gauges(session: Session) -> None:
    """Set the pool gauges from worker_roles and the latest pool decision."""
    counts = workers_per_role(session)
    for role in ("large", "small", *counts):
        POOL_WORKERS.labels(role=role).set(counts.get(role, 0))
    decision = latest_decision(session)
    if decision is None:
        return
    POOL_TARGET.labels(role="large").set(decision.target_large)
    POOL_TARGET.labels(role="small").set(decision.target_small)
    heuristic = decision.heuristic_large  # None: no work in the period, the pool held (NaN)
    POOL_MONITOR_HEURISTIC.set(heuristic if heuristic is not None else float("nan"))
    POOL_MONITOR_CONTROLLED.set(decision.controlled_large)
    POOL_MONITOR_DECIDED.set(decision.decided_at.timestamp())


log = logging.getLogger(__name__)


def export_registry() -> CollectorRegistry:
    """Every API process's metrics in multiprocess mode; this process's otherwise."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


def exposition(session: Session, *, reads: Callable[[], None] | None = None) -> bytes:
    """The text exposition of the metrics, pool gauges refreshed from Postgres first (and the read
    path's from Redis, through `reads`)."""
    try:
        refresh_pool_gauges(session)
        refresh_cascade_gauges(session)
        if reads is not None:
            reads()
    except (SQLAlchemyError, RedisError):  # the HTTP metrics still matter when a store is down
        log.warning("metrics: gauges not refreshed, a store is unreachable", exc_info=True)
    return generate_latest(export_registry())
