"""The settings of operations (issue 16): worker metrics listeners and the log format, a part of
core.settings.Settings, read from the same REPRISE_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import LogFormat


class OpsSettings(BaseSettings):
    """REPRISE_METRICS_*, REPRISE_WORKER_METRICS_* and REPRISE_LOG_FORMAT."""

    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Serve /metrics on this port of metrics_address, not the API's "
        "(issue 12: keep metrics off a public listener). Unset: /metrics on the API port.",
    )  # fmt: skip
    metrics_address: str = Field("127.0.0.1", description="Address of the separate /metrics listener.")

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
