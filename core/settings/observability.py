"""Observability: the Prometheus metrics listeners of the API and the workers, the token /metrics asks
for on the API port, the log format, and Flower (the Celery dashboard) and its authentication."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from core.vocabulary import LogFormat


class ObservabilitySettings(BaseSettings):
    """Observability: metrics listeners, log format and Flower.

    Listeners default to loopback: metrics and Flower stay off public addresses unless asked.
    """

    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Serve /metrics on this port of metrics_address, not the API's (keeps metrics off a "
        "public listener). Unset: /metrics on the API port.",
    )
    metrics_address: str = Field("127.0.0.1", description="Address of the separate /metrics listener.")
    metrics_token: SecretStr | None = Field(
        None,
        description="When set, /metrics on the API port answers only `Authorization: Bearer <token>` (401 "
        "otherwise; Prometheus: `authorization: {credentials: ...}`); the listener of REPRISE_METRICS_PORT "
        "asks for none (it sits on metrics_address, off the public port). Unset: /metrics on the API port "
        "is public, each scrape counted against its address (REPRISE_ANONYMOUS_RATE_LIMIT_PER_S).",
    )
    worker_metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Each worker serves its processes' Prometheus metrics (every pool child summed, "
        "prometheus_client's multiprocess mode) on this port of worker_metrics_address. Unset: no "
        "listener. `reprise run` gives its workers this port and the next ones; compose uses 9100.",
    )
    worker_metrics_address: str = Field(
        "127.0.0.1", description="Address of the workers' metrics listeners (0.0.0.0 in a container)."
    )
    log_format: LogFormat = Field(
        LogFormat.AUTO,
        description="json: one JSON object per line, with the job id, tenant, role, queue and task id on "
        "every line of a job's life; text: human lines; auto: text on a terminal, json otherwise.",
    )
    flower_address: str = Field("127.0.0.1", description="Flower's address; off loopback needs basic auth.")
    flower_basic_auth: SecretStr | None = Field(
        None,
        description="user:password for Flower's basic auth: Flower never runs without authentication on a "
        "non-loopback address.",
    )
