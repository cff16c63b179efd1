"""Prometheus metrics of the API: the instruments each API process updates as it serves, and the pool
monitor's and the cascade allocator's figures, read from Postgres at each scrape (api.exposition serves
both at /metrics, or on REPRISE_METRICS_PORT).

With several API processes (`reprise api --workers N`) prometheus_client's multiprocess mode adds up
every process's instruments (PROMETHEUS_MULTIPROC_DIR, set by `reprise api`). The figures read at scrape
time are no instruments: they are metric families built afresh by the scraping process
(`pool_families`, `cascade_families`), prometheus_client's way of exporting another system's values.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from core.vocabulary import Priority
from db.cascade import CascadeCounts
from db.models import CascadeDecision, PoolDecision

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
JOBS_CREATED = Counter("reprise_jobs_created_total", "Jobs accepted through the API.", ["priority"])
for _priority in Priority:  # every priority's series exists from the start (a rate over none is no rate)
    JOBS_CREATED.labels(_priority.value)
IDEMPOTENT_REPLAYS = Counter("reprise_idempotent_replays_total", "Requests answered with an earlier job.")
JOBS_REJECTED = Counter(
    "reprise_jobs_rejected_total", "Submissions refused for capacity.", ["reason"]
)  # reason: inflight_limit, backpressure, high_priority_limit, deadline_unmet
ENQUEUE_FAILURES = Counter(
    "reprise_enqueue_failures_total",
    "Tasks the API could not put on the broker (the reconciler retries).",
    ["task"],
)


def pool_families(workers: Mapping[str, int], decision: PoolDecision | None) -> list[Metric]:
    """The pools (MoDM 5.3): workers per role (worker_roles) and the monitor's latest decision."""
    pool_workers = GaugeMetricFamily(
        "reprise_pool_workers", "Workers per role (worker_roles).", labels=["role"]
    )
    for role in ("large", "small", *workers):
        pool_workers.add_metric([role], workers.get(role, 0))
    target = GaugeMetricFamily(
        "reprise_pool_target_workers",
        "Workers per pool the monitor's latest decision aims at.",
        labels=["role"],
    )
    heuristic = GaugeMetricFamily(
        "reprise_pool_monitor_heuristic_large", "Algorithm 1's number of large workers before the PID."
    )
    controlled = GaugeMetricFamily(
        "reprise_pool_monitor_controlled_large", "The PID's continuous number of large workers."
    )
    decided = GaugeMetricFamily(
        "reprise_pool_monitor_last_decision_timestamp_seconds", "When the monitor last decided (Unix time)."
    )
    if decision is not None:
        target.add_metric(["large"], decision.target_large)
        target.add_metric(["small"], decision.target_small)
        large = decision.heuristic_large  # None: no work in the period, the pool held (NaN)
        heuristic.add_metric([], large if large is not None else float("nan"))
        controlled.add_metric([], decision.controlled_large)
        decided.add_metric([], decision.decided_at.timestamp())
    return [pool_workers, target, heuristic, controlled, decided]


def cascade_families(last_hour: CascadeCounts | None, decision: CascadeDecision | None) -> list[Metric]:
    """DiffServe's allocator (3.3): its latest decision (cascade_decisions), the last hour's light stages."""
    escalation = GaugeMetricFamily(
        "reprise_cascade_escalation_ratio",
        "Light stages of the last hour the discriminator escalated to the heavy model.",
    )
    if last_hour is not None:
        escalation.add_metric([], last_hour.escalated / last_hour.light if last_hour.light else float("nan"))
    threshold = GaugeMetricFamily(
        "reprise_cascade_threshold",
        "The discriminator confidence a light image needs, as the allocator last set it.",
    )
    target = GaugeMetricFamily(
        "reprise_cascade_target_workers",
        "Workers per cascade model (light, heavy) the MILP's latest solution aims at.",
        labels=["model"],
    )
    solve = GaugeMetricFamily("reprise_cascade_milp_solve_seconds", "How long the latest MILP took to solve.")
    feasible = GaugeMetricFamily(
        "reprise_cascade_feasible",
        "1 when the latest MILP met demand and SLO; 0 when it took the stated fallback.",
    )
    decided = GaugeMetricFamily(
        "reprise_cascade_last_decision_timestamp_seconds",
        "When the cascade's allocator last decided (Unix time).",
    )
    if decision is not None:
        threshold.add_metric([], decision.threshold)
        target.add_metric(["light"], decision.target_light)
        target.add_metric(["heavy"], decision.target_heavy)
        solve.add_metric([], decision.solve_ms / 1e3)
        feasible.add_metric([], 1.0 if decision.feasible else 0.0)
        decided.add_metric([], decision.decided_at.timestamp())
    return [escalation, threshold, target, solve, feasible, decided]
