"""How long a job will wait and run: a queued job's place and expected start, a running job's expected
end. Pure arithmetic over what db.queue_position measures (QueueView).

A queue served by w workers, each taking s seconds a job on average, drains w/s jobs a second: a job
with n jobs ahead of it starts in about n*s/w seconds and ends s later (Little's law with the recent
service time, as MoDM 5.3's monitor reasons about its pools). A running job's remaining time is its
steps left at the pace of its steps so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from db.queue_position import QueueView


@dataclass(frozen=True, slots=True)
class Estimate:
    position: int  # 1: next to start
    start_s: float | None
    finish_s: float | None


def queued_estimate(view: QueueView) -> Estimate:
    position = view.ahead + 1
    if view.mean_run_s is None or view.workers <= 0:
        return Estimate(position=position, start_s=None, finish_s=None)
    start = view.ahead * view.mean_run_s / view.workers
    return Estimate(position=position, start_s=round(start, 1), finish_s=round(start + view.mean_run_s, 1))


def remaining_s(*, step: int, total: int, first_step: int, elapsed_s: float) -> float | None:
    """Seconds left for a run at `step` of `total` that began at `first_step` `elapsed_s` ago; None
    before its first step."""
    done = step - first_step
    if done <= 0 or elapsed_s <= 0:
        return None
    return round((total - step) * elapsed_s / done, 1)
