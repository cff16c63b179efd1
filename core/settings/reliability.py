"""Tasks and reliability: how long a task may run, how a running GPU task holds its job (a lease
renewed by a heartbeat), how often a job is retried, and beat's period for the reconciler and the
other periodic passes. Tasks are at-least-once and idempotent on the job id (DESIGN)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings


class ReliabilitySettings(BaseSettings):
    """Tasks and reliability: time limits, redelivery, leases, attempts and the reconciler.

    Tasks are at-least-once and idempotent on the job id; Postgres, not Redis, is the record of every
    job, so the reconciler re-enqueues what the broker lost.
    """

    task_time_limit_s: int = Field(
        900, ge=10, description="Hard limit of one generation task; the worker kills the child past it."
    )
    visibility_timeout_s: int = Field(
        1800,
        ge=5,
        description="Redis visibility timeout: an unacked task is redelivered after it. Must exceed "
        "task_time_limit_s, or a slow task would run twice.",
    )
    lease_s: float = Field(
        30.0, ge=2, description="A running GPU task holds its job this long and renews it: a dead run is "
        "retried within about lease_s + beat_period_s, not after the task time limit.",
    )  # fmt: skip
    lease_renew_s: float = Field(
        10.0, gt=0, description="How often a running task renews its lease (3 renewals per 30 s lease)."
    )
    max_attempts: int = Field(3, ge=1, le=20, description="Deliveries of a job's task before it fails.")
    stuck_after_s: int = Field(
        120, ge=5, description="The reconciler re-enqueues a queued job untouched for this long."
    )
    beat_period_s: float = Field(30.0, gt=0, description="Period of eviction, retraining and reconciling.")

    @model_validator(mode="after")
    def _check_timing(self) -> Self:
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError(
                f"visibility_timeout_s={self.visibility_timeout_s} must exceed task_time_limit_s="
                f"{self.task_time_limit_s}: raise REPRISE_VISIBILITY_TIMEOUT_S or lower "
                "REPRISE_TASK_TIME_LIMIT_S"
            )
        if self.lease_renew_s > self.lease_s / 2:
            raise ValueError(
                f"lease_renew_s={self.lease_renew_s} must be at most half of lease_s={self.lease_s}, or one "
                "late renewal loses the lease: lower REPRISE_LEASE_RENEW_S or raise REPRISE_LEASE_S"
            )
        return self
