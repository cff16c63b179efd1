"""The settings of operations (issue 16): worker metrics listeners and the log format, a part of
core.settings.Settings, read from the same REPRISE_* environment variables."""

from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import LogFormat

_MIB = 1024 * 1024


def default_shared_buffers_mb() -> int:
    """A quarter of the machine's physical memory, clamped to 128 MiB .. 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 128
    return max(128, min(8192, total // 4 // _MIB))


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
    pg_shared_buffers_mb: int | None = Field(
        None,
        ge=16,
        description="shared_buffers of the embedded Postgres, in MiB. Unset: a quarter of this machine's "
        "memory (Postgres' own advice for a dedicated server), between 128 MiB (its default) and 8 GiB: an "
        "eviction pass over a million entries reads index and heap pages that 128 MiB no longer holds "
        "(issue 17). Applied when the server starts.",
    )
    log_format: LogFormat = Field(
        LogFormat.AUTO,
        description="json: one JSON object per line, with the job id, tenant, role, queue and task id on "
        "every line of a job's life; text: human lines; auto: text on a terminal, json otherwise.",
    )
