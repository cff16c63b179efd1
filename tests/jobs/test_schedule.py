"""The beat schedule: every periodic task, routed to maintenance, and the pool monitor on its period."""

from __future__ import annotations

from core.settings import load_settings
from jobs.queues import ROUTES, Queue, TaskName
from jobs.schedule import beat_schedule


def test_the_pool_monitor_runs_once_per_monitoring_period() -> None:
    schedule = beat_schedule(load_settings(monitor_period_s=120, beat_period_s=30))
    entry = schedule["rebalance-pools"]
    assert entry["task"] == TaskName.REBALANCE_POOLS.value
    # A late run is dropped rather than stacked: the next period's run decides on fresher numbers.
    assert (entry["schedule"], entry["options"]["expires"]) == (120.0, 120.0)
    assert ROUTES[TaskName.REBALANCE_POOLS] == entry["options"]["queue"] == Queue.MAINTENANCE


def test_every_periodic_task_goes_to_maintenance_and_the_monitor_can_be_turned_off() -> None:
    schedule = beat_schedule(load_settings())
    assert {entry["options"]["queue"] for entry in schedule.values()} == {Queue.MAINTENANCE.value}
    assert {entry["task"] for entry in schedule.values()} == {
        TaskName.EVICT,
        TaskName.RETRAIN_PREDICTORS,
        TaskName.RECONCILE,
        TaskName.PURGE_OUTPUTS,
        TaskName.CHECK_INDEXES,
        TaskName.REBALANCE_POOLS,
    }
    assert "rebalance-pools" not in beat_schedule(load_settings(monitor_enabled=False))
