"""A waiting job's place and expected start, a running job's expected end (jobs.estimates)."""

from __future__ import annotations

from db.queue_position import QueueView
from jobs.estimates import queued_estimate, remaining_s


def test_a_job_with_n_ahead_starts_after_n_runs_shared_by_the_workers() -> None:
    estimate = queued_estimate(QueueView(ahead=6, workers=3, mean_run_s=2.0))
    assert (estimate.position, estimate.start_s, estimate.finish_s) == (7, 4.0, 6.0)


def test_the_next_job_starts_now() -> None:
    estimate = queued_estimate(QueueView(ahead=0, workers=1, mean_run_s=1.5))
    assert (estimate.position, estimate.start_s, estimate.finish_s) == (1, 0.0, 1.5)


def test_no_history_or_no_worker_gives_a_place_but_no_time() -> None:
    for view in (
        QueueView(ahead=2, workers=2, mean_run_s=None),
        QueueView(ahead=2, workers=0, mean_run_s=1.0),
    ):
        estimate = queued_estimate(view)
        assert (estimate.position, estimate.start_s, estimate.finish_s) == (3, None, None)


def test_the_remaining_time_is_the_steps_left_at_the_pace_so_far() -> None:
    assert remaining_s(step=30, total=50, first_step=10, elapsed_s=4.0) == 4.0  # 20 steps in 4 s, 20 left
    assert remaining_s(step=50, total=50, first_step=0, elapsed_s=9.0) == 0.0
    assert remaining_s(step=10, total=50, first_step=10, elapsed_s=1.0) is None  # no step of its own yet
