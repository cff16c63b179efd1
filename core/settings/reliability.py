"""Tasks and reliability: how long a task may run, how a running GPU task holds its job (a lease
renewed by a heartbeat), how often a job is retried, beat's period for the reconciler and the
other periodic passes, and the lock that lets one beat at a time send them. Tasks are at-least-once
and idempotent on the job id (DESIGN)."""

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
    beat_lock_ttl_s: float = Field(
        30.0,
        gt=0,
        description="Only the beat holding a lock in Redis sends the periodic tasks (jobs/beat_lock.py); "
        "a beat that dies without releasing it loses it after this long, and a waiting beat takes over then. "
        "30 s with a renewal every 10 s, as the job lease (lease_s, lease_renew_s): two renewals may fail "
        "before it lapses (celery-redbeat lets its lock lapse after 5 missed loops, redbeat_lock_timeout).",
    )
    beat_lock_renew_s: float = Field(
        10.0,
        gt=0,
        description="How often the beat holding the lock renews it, and the longest a waiting beat sleeps "
        "between tries (3 renewals per 30 s TTL).",
    )

    @model_validator(mode="after")
    def _check_timing(self) -> Self:
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError(
                f"visibility_timeout_s={self.visibility_timeout_s} must exceed task_time_limit_s="
                f"{self.task_time_limit_s}: raise REPRISE_VISIBILITY_TIMEOUT_S or lower "
                "REPRISE_TASK_TIME_LIMIT_S"
            )
        if self.beat_lock_renew_s > self.beat_lock_ttl_s / 2:
            raise ValueError(
                f"beat_lock_renew_s={self.beat_lock_renew_s} must be at most half of beat_lock_ttl_s="
                f"{self.beat_lock_ttl_s}, or one late renewal lets a second beat in: lower "
                "REPRISE_BEAT_LOCK_RENEW_S or raise REPRISE_BEAT_LOCK_TTL_S"
            )
        if self.lease_renew_s > self.lease_s / 2:
            raise ValueError(
                f"lease_renew_s={self.lease_renew_s} must be at most half of lease_s={self.lease_s}, or one "
                "late renewal loses the lease: lower REPRISE_LEASE_RENEW_S or raise REPRISE_LEASE_S"
            )
        return self
