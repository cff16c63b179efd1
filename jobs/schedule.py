"""Every periodic task, in one place (run by `reprise beat`, the one scheduler)."""

from __future__ import annotations

from typing import Any

from core.settings import Settings
from jobs.queues import ROUTES, TaskName


def _every(task: TaskName, period: float) -> dict[str, Any]:
    # Expire each run after one period: a backlog of identical maintenance runs helps nobody.
    return {
        "task": task.value,
        "schedule": period,
        "options": {"queue": ROUTES[task].value, "expires": period},
    }


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    period = settings.beat_period_s
    schedule: dict[str, dict[str, Any]] = {
        "evict": _every(TaskName.EVICT, period),
        "retrain-predictors": _every(TaskName.RETRAIN_PREDICTORS, period),
        "reconcile": _every(TaskName.RECONCILE, settings.reconcile_period_s),
        "purge-outputs": _every(TaskName.PURGE_OUTPUTS, period),  # deletes, and REPRISE_RETENTION_DAYS
        "check-indexes": _every(TaskName.CHECK_INDEXES, settings.index_check_period_s),
    }
    if settings.quality_guard:  # the guard's controller, as often as eviction and retraining
        schedule["guard-quality"] = _every(TaskName.GUARD_QUALITY, period)
    if settings.monitor_enabled:
        # The one controller of the pools (REPRISE_ALLOCATOR) re-plans once per monitoring period: MoDM
        # 5.3's global monitor, or DiffServe 3.3's MILP, which also sets the cascade's threshold.
        schedule["rebalance-pools"] = _every(TaskName.REBALANCE_POOLS, float(settings.monitor_period_s))
    return schedule
