"""Prometheus metrics of the API process, served at /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
