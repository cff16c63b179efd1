"""A GPU run's clock (workers.run_clock): its deadline from its steps and its own step cost, with a floor
and the task time limit as cap; a step that has not returned past run_stall_s is a hung model call."""

from __future__ import annotations

import pytest

from workers.run_clock import DeadlinePolicy, RunClock

POLICY = DeadlinePolicy(floor_s=60.0, slack=4.0, cap_s=900.0, stall_s=30.0)


def test_the_budget_is_slack_times_steps_times_step_cost_between_the_floor_and_the_cap() -> None:
    assert POLICY.budget_s(50, 1.0) == 200.0  # 4 x 50 x 1 s
    assert POLICY.budget_s(50, 0.04) == 60.0  # 8 s of steps: the floor
    assert POLICY.budget_s(1000, 1.0) == 900.0  # 4000 s: the task time limit
    assert POLICY.budget_s(None, None) == 900.0  # no step measured yet: the cap
    assert POLICY.budget_s(50, None) == 900.0


def test_the_deadline_follows_the_runs_own_steps_from_its_start() -> None:
    clock = RunClock(POLICY, now=100.0)
    assert clock.deadline == 1000.0  # nothing measured: the cap
    for step in range(21, 24):  # a hit resumed at k = 20 of T = 50: 30 steps to make, 2 s each
        clock.step_begins(100.0 + 2 * (step - 21))
        clock.step_ended(step, 50, 102.0 + 2 * (step - 21))
    assert clock.steps == 30 and clock.step_s == pytest.approx(2.0)
    assert clock.deadline == pytest.approx(100.0 + 4 * 30 * 2.0)
    assert clock.overdue(339.0) is None
    reason = clock.overdue(341.0)
    assert reason is not None and "past its deadline" in reason and "30 steps" in reason


def test_a_step_open_past_the_stall_limit_is_a_hung_call_and_an_ended_run_has_none() -> None:
    clock = RunClock(POLICY, now=0.0)
    clock.step_begins(10.0)
    clock.step_begins(11.0)  # asked again before the step ran (a member waiting its turn): still 10
    assert clock.stalled(39.9) is None
    reason = clock.stalled(40.0)
    assert reason is not None and "hung model call" in reason
    assert clock.fault(40.0) == reason
    clock.run_ended()  # canceled or failed: no step is open
    assert clock.stalled(1000.0) is None and clock.fault(100.0) is None
