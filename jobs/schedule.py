"""Every periodic task, in one place (run by `reprise beat`, the one scheduler)."""

from __future__ import annotations

from typing import Any

from core.settings import Settings
from jobs.queues import Queue, TaskName


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    period = settings.beat_period_s
    # Expire each run after one period: a backlog of identical maintenance runs helps nobody.
    options = {"queue": Queue.MAINTENANCE.value, "expires": period}
    schedule: dict[str, dict[str, Any]] = {
        "evict": {"task": TaskName.EVICT.value, "schedule": period, "options": options},
        "retrain-predictors": {
            "task": TaskName.RETRAIN_PREDICTORS.value,
            "schedule": period,
            "options": options,
        },
        "reconcile": {"task": TaskName.RECONCILE.value, "schedule": period, "options": options},
    }
    if settings.monitor_enabled:
        # MoDM 5.3: the global monitor re-plans the pools once per monitoring period.
        monitor = float(settings.monitor_period_s)
        schedule["rebalance-pools"] = {
            "task": TaskName.REBALANCE_POOLS.value,
            "schedule": monitor,
            "options": {"queue": Queue.MAINTENANCE.value, "expires": monitor},
        }
    return schedule
