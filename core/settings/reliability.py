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
    # Recovery within a minute of a fault's end (a killed worker, Postgres or Redis down for a while,
    # a lost message) on these defaults, measured with `reprise bench chaos --base-url` against a
    # default `reprise run` (docs/results/chaos.md, "On the default settings"). The arithmetic:
    #   a dead run:   lease_s (15) + reconcile_period_s (10) = 25 s until it is sent again;
    #   a lost message: stuck_after_s (20) + reconcile_period_s (10) = 30 s;
    #   the broker back: Celery's consumer reconnects 2, 4, 6... s apart (kombu's ensure_connection,
    #   not configurable): within about 12 s of a minute-long Redis outage's end;
    # which leaves 30 s or more of the 60 s budget for the job's run and its queue.
    lease_s: float = Field(
        15.0,
        ge=2,
        description="A running GPU task holds its job this long and renews it: a dead run is sent again "
        "within lease_s + reconcile_period_s (25 s), not after the task time limit. Also how long a run "
        "rides out Postgres being unreachable before it stops. 15 s: that sum plus a job's run within "
        "the one-minute recovery budget (docs/results/chaos.md).",
    )
    lease_renew_s: float = Field(
        5.0,
        gt=0,
        description="How often a running task renews its lease: 3 renewals per 15 s lease, so two may "
        "fail before it lapses.",
    )
    max_attempts: int = Field(3, ge=1, le=20, description="Deliveries of a job's task before it fails.")
    # A run's deadline (workers.run_clock): min(task_time_limit_s, max(floor, slack x steps x step cost)),
    # the step cost measured on the run's own steps. The floor holds what is not a step (claim, the
    # cached latent's read, the prompt, the decode and the store: under 50 ms each, median, on the lab's
    # models on two shared cores, docs/results/throughput.md "Where a job's time went"); the slack lets
    # a step slow as the batch fills (a lab step costs 32.3 ms at batch 8, 3.9x its 8.2 ms alone, same
    # page).
    run_deadline_floor_s: float = Field(
        60.0,
        gt=0,
        description="Least time a GPU run has before its deadline, whatever its steps: what is not a step "
        "(the prompt, the cached latent, the decode and the store) fits in it many times over.",
    )
    run_deadline_slack: float = Field(
        4.0,
        ge=1,
        description="A run's deadline allows this many times its steps at the step cost measured on its "
        "own steps: a lab step at batch 8 costs 3.9x its cost alone (docs/results/throughput.md).",
    )
    run_stall_s: float = Field(
        30.0,
        gt=0,
        description="A denoising step that has not returned after this long is a hung model call: the "
        "run's lease is no longer renewed (the reconciler sends the job to another worker) and the worker "
        "is unhealthy. 30 s: some 500 times the slowest step measured (the lab's large model at batch 16 "
        "on a CPU, 62 ms, docs/results/throughput.md).",
    )
    worker_stall_s: float = Field(
        45.0,
        gt=0,
        description="A worker with a free slot that took and finished nothing this long while its queues "
        "hold work has stopped consuming: it is not alive (`reprise worker-alive`) and exits to be "
        "restarted. 45 s, with liveness_period_s, restarts it within a minute.",
    )
    liveness_period_s: float = Field(
        5.0,
        gt=0,
        description="How often a worker's main process judges its own liveness and writes it to "
        "<data_dir>/liveness/<pid>.json; a report three periods old means the process is frozen.",
    )
    stuck_after_s: int = Field(
        20,
        ge=5,
        description="The reconciler re-enqueues a waiting job untouched this long whose message the broker "
        "no longer holds (a job queued behind others keeps its place): a lost message costs "
        "stuck_after_s + reconcile_period_s (30 s). Also how long a message delivered to a worker and "
        "not acked counts as held, and how overdue a webhook retry or never-sent event must be.",
    )
    reconcile_period_s: float = Field(
        10.0,
        gt=0,
        description="Period of the reconciler (beat): a lost message or a dead run is found within it of "
        "becoming so. 10 s: one query of Postgres and one read of the broker's job queues per period.",
    )
    beat_period_s: float = Field(
        30.0, gt=0, description="Period of eviction, predictor retraining, the purge and the quality guard."
    )
    beat_lock_ttl_s: float = Field(
        30.0,
        gt=0,
        description="Only the beat holding a lock in Redis sends the periodic tasks (jobs/beat_lock.py); "
        "a beat that dies without releasing it loses it after this long, and a waiting beat takes over then. "
        "30 s with a renewal every 10 s: two renewals may fail before it lapses, as with the job lease "
        "(lease_s, lease_renew_s) (celery-redbeat lets its lock lapse after 5 missed loops, "
        "redbeat_lock_timeout).",
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
        if self.liveness_period_s * 3 > self.worker_stall_s:
            raise ValueError(
                f"liveness_period_s={self.liveness_period_s} must be at most a third of worker_stall_s="
                f"{self.worker_stall_s}, or a healthy worker's report goes stale before a stall is judged: "
                "lower REPRISE_LIVENESS_PERIOD_S or raise REPRISE_WORKER_STALL_S"
            )
        if self.lease_renew_s > self.lease_s / 2:
            raise ValueError(
                f"lease_renew_s={self.lease_renew_s} must be at most half of lease_s={self.lease_s}, or one "
                "late renewal loses the lease: lower REPRISE_LEASE_RENEW_S or raise REPRISE_LEASE_S"
            )
        return self
